"""InSPyReNet's edge refinement on CUDA, its tiles guided-filtered in batches of up to 32, answers
what the CPU answers one tile at a time (the GPU suite's 4000x3000 matte runs on the uncalibrated
checkpoint, which refines no tile: this is where the batches are held to the reference on CUDA)."""

from __future__ import annotations

import pytest
import torch

from craftai_dev.refinement import refined_one_tile_at_a_time, ring_picture
from craftai_infer.pipelines import matte_refine as pipeline
from craftai_infer.pipelines.matte_inspyrenet import MatteSettings, tile_count
from craftai_infer.pipelines.matte_refine import edge_tiles, refine_radius

pytestmark = pytest.mark.gpu


def test_batched_tiles_on_cuda_answer_what_the_cpu_answers_tile_by_tile() -> None:
    rgb, alpha = ring_picture(2000, 3000, blur=12)  # 12 x 8 tiles of 256 (48 on the edges), several layouts
    settings = MatteSettings().refinement
    r = refine_radius(1280 / 4000)
    tiles = edge_tiles(alpha, settings.tile, 2 * r, settings.edge_margin)
    assert pipeline.TILES_PER_CALL["cuda"] < len(tiles) < tile_count(2000, 3000)  # several calls, not every tile
    on_cuda = pipeline.refine_edges(rgb.cuda(), alpha.cuda(), r, settings).cpu()
    reference = refined_one_tile_at_a_time(rgb, alpha, r, settings)
    assert float((reference - alpha).abs().max()) > 0.05  # the filter changed the tiles
    torch.testing.assert_close(on_cuda, reference, rtol=0, atol=1e-5)
