"""tools/bench/rembg_recipes.py at a tiny size: one round of u2netp (the published file, the
smallest of rembg's models), ours through `craftai serve` beside rembg's session, both answered and
timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import rembg_recipes

pytestmark = pytest.mark.slow


def test_one_recipe_one_round(tmp_path: Path) -> None:
    assert rembg_recipes.main(["--out", str(tmp_path), "--rounds", "1", "--recipes", "u2netp"]) == 0
    found = json.loads((tmp_path / "rembg_recipes.json").read_text())
    (only,) = found["recipes"].values()
    assert list(found["recipes"]) == ["u2netp"] and found["rounds"] == 1
    assert only["rembg_s"] > 0 and only["ours_s"] > 0 and only["ours_per_rembg_speed"] > 0
