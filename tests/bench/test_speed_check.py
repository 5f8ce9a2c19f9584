"""tools/gpu/speed_check.py (issue 19's GPU figures) at a tiny size on the CPU: its own section (the
calibrated checkpoint, the route in this process, the tiles refined) runs and reports; the sections
it borrows from tools/bench/run.py run tiny in test_bench_runs.py. No timed assertions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_in_process_section_runs_at_a_tiny_size(tmp_path: Path) -> None:
    command = [sys.executable, "tools/gpu/speed_check.py", "--tiny", "--device", "cpu", "--sections", "inprocess"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "speed_check.json").read_text())["inprocess"]
    assert result["uncalibrated"]["refined_tiles"] == 0  # the saturated matte the bench measured before
    assert 0 < result["calibrated"]["refined_tiles"] <= result["tiles"]
    assert "in-process, calibrated checkpoint" in (tmp_path / "speed_check.md").read_text()
