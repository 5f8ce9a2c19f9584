"""The edge refinement as it was first written, one guided-filter call per edge tile: the reference
the batched `refine_edges` is held to (tests/unit/test_matte_inspyrenet_pipeline.py on the CPU,
tests/gpu/test_refinement_cuda.py on CUDA), and a picture and matte that give it many tiles."""

from __future__ import annotations

import numpy as np
import torch

from craftai_infer.pipelines.guided_filter import guided_filter
from craftai_infer.pipelines.matte_refine import Refinement, edge_tiles


def refined_one_tile_at_a_time(rgb: torch.Tensor, alpha: torch.Tensor, r: int, settings: Refinement) -> torch.Tensor:
    _, _, h, w = alpha.shape
    margin = 2 * r
    out = alpha.clone()
    for y0, x0 in edge_tiles(alpha, settings.tile, margin, settings.edge_margin):
        y1, x1 = min(y0 + settings.tile, h), min(x0 + settings.tile, w)
        ya, xa, yb, xb = max(y0 - margin, 0), max(x0 - margin, 0), min(y1 + margin, h), min(x1 + margin, w)
        guide = rgb[ya:yb, xa:xb].permute(2, 0, 1).unsqueeze(0).float() / 255.0
        q = guided_filter(guide, alpha[:, :, ya:yb, xa:xb], r, settings.eps)
        out[:, :, y0:y1, x0:x1] = q[:, :, y0 - ya : y1 - ya, x0 - xa : x1 - xa].clamp(0.0, 1.0)
    return out


def ring_picture(h: int, w: int, blur: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A textured picture with a bright ring on it, and a blurred matte of the ring's outline a few
    pixels off (as an enlarged matte is): (H, W, 3) uint8 and (1, 1, H, W) float32."""
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    d = np.hypot(yy - h / 2, xx - w / 2)
    outer, inner = 0.4 * min(h, w), 0.15 * min(h, w)
    rgb[(d < outer) & (d > inner)] = [230, 200, 180]
    alpha = torch.from_numpy(((d < outer + 3) & (d > inner - 3)).astype(np.float32))[None, None]
    alpha = torch.nn.functional.avg_pool2d(alpha, 2 * blur + 1, 1, blur, count_include_pad=False)
    return torch.from_numpy(rgb), alpha
