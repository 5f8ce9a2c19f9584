"""The generated stubs are up to date with protos/ (the generator's --check mode)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_stubs_are_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, "tools/gen_protos.py", "--check"], check=False, cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_check_fails_when_a_stub_differs(tmp_path: Path) -> None:
    """--check must be able to fail: run it on a copy of the tree with one stub changed."""
    copy = tmp_path / "repo"
    for part in ("protos", "tools", "clients/wire/src/craftai_wire/v1"):
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(REPO / part, copy / part)
    stub = copy / "clients/wire/src/craftai_wire/v1/infer_pb2.py"
    stub.write_text(stub.read_text() + "\n# edited by hand\n")
    done = subprocess.run(
        [sys.executable, "tools/gen_protos.py", "--check"], check=False, cwd=copy, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "infer_pb2.py" in done.stderr
