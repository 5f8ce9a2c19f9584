"""tools/bench/proto_copies.py at a tiny size: each message the service and the SDK now write in
place serialises to the same bytes as the message put in as before (the tool exits 1 otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_messages_written_in_place_are_the_same_bytes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench.proto_copies", "--tiny", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((tmp_path / "proto_copies.json").read_text())
    assert len(results) == 3 and all(r["same_bytes"] for r in results.values()), results
