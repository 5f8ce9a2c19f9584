"""The matte benchmarks' calibrated InSPyReNet checkpoint (craftai_dev.inspyrenet_fixture
`calibrated`, which tools/bench/run.py and matte_gpu.py measure the pipeline with) gives a matte
whose edges the refinement works on, where the plain random checkpoint's saturated matte refines
no tile: the figures of docs/PERFORMANCE.md measure the refinement at work. At a tiny size on the
CPU (a 64² calibration, a 32 px network side)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev.inspyrenet_fixture import calibrated, checkpoints
from craftai_dev.samples import photos
from craftai_infer.pipelines.matte_inspyrenet import MatteSettings, network_input, refined_tiles, tile_count
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.inspyrenet_torch import InspyrenetTorch

pytestmark = pytest.mark.slow


def _refined(weights: Path, rgb: np.ndarray, settings: MatteSettings) -> int:
    route = InspyrenetTorch(RouteFiles({"weights": weights}, None, 0), "cpu")
    route.warm_up(lambda _message: None)
    with torch.inference_mode():
        prepared = network_input(rgb, torch.device("cpu"), settings)
        out = route.forward(prepared.x).float().clamp(0.0, 1.0)
    return refined_tiles(prepared, out, settings)


def test_the_calibrated_checkpoint_gives_the_refinement_edges_to_work_on() -> None:
    settings = MatteSettings(max_side=32, tile=16)  # a small picture is still reduced, then refined
    rgb = np.asarray(Image.open(photos()["astronaut.png"]).convert("RGB").resize((120, 90), Image.Resampling.BICUBIC))
    tiles = tile_count(90, 120, settings)
    assert _refined(checkpoints()["random"].path, rgb, settings) == 0  # the saturated matte measured before
    assert 0 < _refined(calibrated(64, "cpu").path, rgb, settings) <= tiles
