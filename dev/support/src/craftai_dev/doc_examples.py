"""The documentation's examples as programs, for tests/integration/test_doc_examples.py: every
```python block of README.md and docs/*.md, and every ```bash block marked to run.

A marker is an HTML comment alone on the line before the fence (a rendered page does not show it):

- `<!-- example: run -->` before a bash block: run it. Bash blocks are not run otherwise: most of
  them start servers, build images or deploy, which the examples' test cannot do.
- `<!-- example: not run: REASON -->` before a python block: not run here, because REASON (a GPU,
  a server elsewhere); the test reports it skipped with that reason, never silently.

Any other `<!-- example: ... -->` is an error, so that a mistyped marker cannot turn a check off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<what>.*?)\s*-->\s*$")
RUN = "run"
NOT_RUN = "not run:"
# The documented default addresses, which the test points at its own servers.
GRPC_ADDRESS = "127.0.0.1:50051"
HTTP_ADDRESS = "http://127.0.0.1:8080"


class MarkerError(ValueError):
    """A marker the test does not know, or one on a block it does not fit."""


@dataclass(frozen=True)
class Example:
    """One block of a document: where it is, its language, its code, and why it is not run (None: it runs)."""

    document: str  # relative to the checkout, e.g. "docs/WEB.md"
    line: int  # the opening fence's line, from 1
    language: str  # "python" or "bash"
    code: str
    not_run: str | None = None

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def documents(root: Path) -> list[Path]:
    """README.md, then docs/*.md by name: the order the examples run in."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def examples(root: Path) -> list[Example]:
    """Every python block and every bash block marked to run, in document order."""
    found: list[Example] = []
    for path in documents(root):
        found += _blocks(path, path.relative_to(root).as_posix())
    return found


def _blocks(path: Path, document: str) -> list[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None or not opening["language"]:
            index += 1
            if opening is not None:  # a fence without a language: skip to its end
                index = _closing(lines, index, opening["indent"]) + 1
            continue
        end = _closing(lines, index + 1, opening["indent"])
        indent = len(opening["indent"])
        code = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        marker = _marker(lines, index)
        language = opening["language"]
        where = f"{document}:{index + 1}"
        if marker is not None and marker != RUN and not marker.startswith(NOT_RUN):
            raise MarkerError(f"{where}: unknown marker {marker!r} (`{RUN}` or `{NOT_RUN} REASON`)")
        if language == "python":
            if marker == RUN:
                raise MarkerError(f"{where}: python blocks run without a marker")
            reason = marker[len(NOT_RUN) :].strip() if marker else None
            if reason == "":
                raise MarkerError(f"{where}: `{NOT_RUN}` needs its reason")
            found.append(Example(document, index + 1, language, code, reason))
        elif marker is not None:
            if language != "bash" or marker != RUN:
                raise MarkerError(f"{where}: only bash blocks are marked `{RUN}`, and python ones `{NOT_RUN}`")
            found.append(Example(document, index + 1, language, code))
        index = end + 1
    return found


def _closing(lines: list[str], start: int, indent: str) -> int:
    for index in range(start, len(lines)):
        if lines[index].strip() == "```" and lines[index].startswith(indent):
            return index
    raise MarkerError(f"a fence opened before line {start} is never closed")


def _marker(lines: list[str], fence: int) -> str | None:
    """The marker on the line just before the fence, if any."""
    if fence == 0:
        return None
    found = MARKER.match(lines[fence - 1])
    return found["what"] if found else None


def pointed(code: str, grpc_address: str, http_address: str) -> str:
    """The example with the documented default addresses replaced by the test's servers'."""
    return code.replace(HTTP_ADDRESS, http_address.rstrip("/")).replace(GRPC_ADDRESS, grpc_address)
