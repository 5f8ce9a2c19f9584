"""tools/bench/picture_input.py runs and reports every way of sending a picture (no timed assertion)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_picture_input_bench_runs_at_a_tiny_size(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.bench.picture_input",
            "--sizes",
            "64x48",
            "--rounds",
            "2",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "picture_input.json").read_text())
    ways = results["64x48"]
    assert len(ways) == 4
    assert ways["the array as the SDK sends it (binary PPM)"]["bytes"] == len(b"P6\n64 48\n255\n") + 64 * 48 * 3
