"""The benchmark runs (CI checks the code at a tiny size on the CPU; figures come from the GPU
machine: docs/PERFORMANCE.md). No timed assertions: only that every section runs and reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_section_runs_at_a_tiny_size(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # the run's temporary folders: each section removes its own
    scratch.mkdir()
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench.run", "--tiny", "--device", "cpu", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # served stores are hundreds of MB each; libraries' own small files (torch's compile cache) may stay
    left = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in scratch.iterdir()}
    assert not [name for name in left if name.startswith("bench-")], left
    assert sum(left.values()) < 1 << 20, left
    results = json.loads((out / "bench.json").read_text())
    assert set(results) >= {"sam_inprocess", "sam_grpc", "matte_inprocess", "matte_grpc", "u2netp_cpu"}
    assert results["u2netp_cpu"]["same_output"] is True
    assert results["sam_grpc"]["click_round_trip_ms"]["n"] > 0
    assert "peer_pipeline_ms" in results["matte_inprocess"]  # measured, or why not
    assert "| clients | rembg | ours | ratio |" in (out / "bench.md").read_text()
    if find_spec("openvino") is not None:  # tools/bootstrap.sh --dev installs it: CI runs this
        assert results["u2netp_cpu"]["max_abs_diff_openvino"] <= 1
        assert "| clients | rembg | ours (onnxruntime) | ours (openvino) |" in (out / "bench.md").read_text()
