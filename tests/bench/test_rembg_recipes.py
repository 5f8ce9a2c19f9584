"""tools/bench/rembg_recipes.py at a tiny size: one round of u2netp (the published file, the
smallest of rembg's models), ours through `craftai serve` (onnxruntime and torch) beside rembg's
session, all answered and timed; on a GPU without onnxruntime's CUDA build it stops and says how to
bring it.

The bench runs in a process of its own, as it is run: it imports rembg with pymatting's numba
functions left uncompiled (never called on its path), which must not be the pymatting that later
tests of this worker compare against (tests/parity/test_foreground_pymatting.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_one_recipe_one_round(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tools.bench.rembg_recipes", "--out", str(tmp_path), "--rounds", "1"]
    done = subprocess.run(
        [*command, "--recipes", "u2netp", "--torch"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads((tmp_path / "rembg_recipes.json").read_text())
    (only,) = found["recipes"].values()
    assert list(found["recipes"]) == ["u2netp"] and found["rounds"] == 1
    assert only["rembg_s"] > 0 and only["ours_s"] > 0 and only["ours_per_rembg_speed"] > 0
    assert only["ours_torch_s"] > 0 and only["routes"] == {"onnxruntime": "cpu", "torch": "cpu"}
    assert only["rembg_providers"] == ["CPUExecutionProvider"]


def test_on_a_gpu_without_onnxruntimes_cuda_build_it_says_how_to_bring_it(tmp_path: Path) -> None:
    """rembg's session would fall back to the CPU and time the wrong thing: the run stops first."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider: the run would go ahead")
    command = [sys.executable, "-m", "tools.bench.rembg_recipes", "--out", str(tmp_path), "--device", "cuda"]
    done = subprocess.run(
        [*command, "--recipes", "u2netp"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode != 0 and "tools/gpu/ort_gpu.sh" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "rembg_recipes.json").exists()
