"""tools/bench/rembg_recipes.py at a tiny size: one round of u2netp (the published file, the
smallest of rembg's models), ours through `craftai serve` beside rembg's session, both answered and
timed.

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
        [*command, "--recipes", "u2netp"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads((tmp_path / "rembg_recipes.json").read_text())
    (only,) = found["recipes"].values()
    assert list(found["recipes"]) == ["u2netp"] and found["rounds"] == 1
    assert only["rembg_s"] > 0 and only["ours_s"] > 0 and only["ours_per_rembg_speed"] > 0
