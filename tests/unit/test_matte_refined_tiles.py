"""The refinement's tile count (what the bench reports) is the number of tiles it filters (the
guided filter takes them in batches: its calls' batch sizes add up to the count)."""

from __future__ import annotations

import pytest
import torch

from craftai_infer.pipelines import matte_refine
from craftai_infer.pipelines.guided_filter import guided_filter
from craftai_infer.pipelines.matte_inspyrenet import matte_inspyrenet, network_input, refined_tiles, tile_count
from tests.unit.test_matte_inspyrenet_pipeline import RedThreshold, disc_picture


@pytest.mark.parametrize(("h", "w"), [(1200, 2600), (600, 800)])
def test_refined_tiles_counts_the_filtered_tiles(monkeypatch: pytest.MonkeyPatch, h: int, w: int) -> None:
    calls: list[tuple[int, ...]] = []

    def spy(guide: torch.Tensor, p: torch.Tensor, r: int, eps: float) -> torch.Tensor:
        calls.append(tuple(p.shape))
        return guided_filter(guide, p, r, eps)

    monkeypatch.setattr(matte_refine, "guided_filter", spy)
    rgb = disc_picture(h, w)
    matte_inspyrenet(rgb, RedThreshold())
    prepared = network_input(rgb, torch.device("cpu"))
    with torch.inference_mode():
        out = RedThreshold()(prepared.x).float().clamp(0.0, 1.0)
    filtered = sum(shape[0] for shape in calls)
    assert refined_tiles(prepared, out) == filtered
    assert (filtered > 0) == (w == 2600)  # refined only below half scale
    assert filtered < tile_count(h, w) == -(-h // 256) * -(-w // 256)
