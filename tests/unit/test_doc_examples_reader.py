"""The reader of the documents' examples (craftai_dev.doc_examples): python blocks are taken, bash
blocks only when marked, a block marked not run keeps its reason, and a marker it does not know is
an error rather than a check silently turned off."""

from __future__ import annotations

from pathlib import Path

import pytest

from craftai_dev import doc_examples


def _docs(tmp_path: Path, text: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# r\n")
    (tmp_path / "docs" / "A.md").write_text(text)
    return tmp_path


def test_python_blocks_and_marked_bash_blocks_are_taken(tmp_path: Path) -> None:
    text = (
        "```python\nprint(1)\n```\n\n```bash\nrm -rf /\n```\n\n<!-- example: run -->\n```bash\necho hi\n```\n\n"
        "<!-- example: not run: needs a CUDA GPU -->\n```python\nimport torch\n```\n\n```\nplain\n```\n"
        "- a list\n\n  ```python\n  x = 1\n  ```\n"
    )
    found = doc_examples.examples(_docs(tmp_path, text))
    assert [(e.name, e.language, e.code, e.not_run) for e in found] == [
        ("docs/A.md:1", "python", "print(1)\n", None),
        ("docs/A.md:10", "bash", "echo hi\n", None),
        ("docs/A.md:15", "python", "import torch\n", "needs a CUDA GPU"),
        ("docs/A.md:24", "python", "x = 1\n", None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "<!-- example: skip -->\n```python\nx\n```\n",
        "<!-- example: not run: -->\n```python\nx\n```\n",
        "<!-- example: run -->\n```python\nx\n```\n",
        "<!-- example: run -->\n```yaml\nx: 1\n```\n",
        "```python\nnever closed\n",
    ],
)
def test_a_marker_that_does_not_fit_is_an_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(doc_examples.MarkerError):
        doc_examples.examples(_docs(tmp_path, text))


def test_the_documented_addresses_are_pointed_at_the_tests_servers() -> None:
    code = "curl http://127.0.0.1:8080/api/v1/status\nAiClient(target='127.0.0.1:50051')\n"
    pointed = doc_examples.pointed(code, "127.0.0.1:4242", "http://127.0.0.1:4343/")
    assert pointed == "curl http://127.0.0.1:4343/api/v1/status\nAiClient(target='127.0.0.1:4242')\n"
