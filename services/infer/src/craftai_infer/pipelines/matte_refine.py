"""The edge refinement of a matte enlarged from a reduced network input, shared by the InSPyReNet
and BiRefNet pipelines (docs/MATTE.md): a colour guided filter at full resolution, on the tiles near
the subject's edge only, radius ⌈3/scale⌉ for a matte enlarged by 1/scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines.guided_filter import guided_filter

__all__ = ["TILES_PER_CALL", "Refinement", "edge_tiles", "refine_edges", "refine_radius"]


@dataclass(frozen=True)
class Refinement:
    """The refinement's constants (docs/MATTE.md says why each has its value)."""

    tile: int = 256  # refinement tile side, full-resolution pixels
    edge_margin: float = 0.01  # "~0" is <= this, "~1" is >= 1 - this
    eps: float = 1e-4  # guided filter ε, guide in [0, 1] (colour units squared)


def refine_radius(scale: float) -> int:
    """Guided filter radius in full-resolution pixels for a matte enlarged by 1/scale: ⌈3/scale⌉.

    The enlarged matte's edges are spread over a few low-resolution pixels, i.e. a few times 1/scale
    full-resolution pixels; a window must see both sides of such an edge. 3/scale (10 px for a
    4000 px picture) gave the lowest edge error in tools/matte_refine_study.py (docs/MATTE.md).
    """
    return max(2, math.ceil(3.0 / scale))


def edge_tiles(alpha: Tensor, tile: int, margin: int, edge_margin: float) -> list[tuple[int, int]]:
    """Top-left corners of the tiles whose matte, with `margin` pixels around, is neither ~0 everywhere
    nor ~1 everywhere. alpha: (1, 1, H, W)."""
    window = tile + 2 * margin
    # Max pooling pads with -inf, so border tiles only see the picture.
    hi = F.max_pool2d(alpha, window, stride=tile, padding=margin, ceil_mode=True)
    lo = -F.max_pool2d(-alpha, window, stride=tile, padding=margin, ceil_mode=True)
    selected = (hi > edge_margin) & (lo < 1.0 - edge_margin)
    rows, cols = torch.nonzero(selected[0, 0], as_tuple=True)
    return [(int(r) * tile, int(c) * tile) for r, c in zip(rows.tolist(), cols.tolist(), strict=True)]


# Edge tiles filtered in one guided-filter call. On a GPU the batch saves kernel launches; its
# float64 running sums take ~60 MB a 256² tile with its margin, ~2 GB a call. On a CPU one tile at a
# time is the fastest (a batch's sums outgrow the caches, and there are no launches to save):
# docs/PERFORMANCE.md, "InSPyReNet's edge refinement in batches".
TILES_PER_CALL = {"cuda": 32, "cpu": 1}


@dataclass(frozen=True)
class _Tile:
    """An edge tile: its rows/columns [y0, y1) x [x0, x1), filtered within its window [ya, yb) x [xa, xb)."""

    y0: int
    x0: int
    y1: int
    x1: int
    ya: int
    xa: int
    yb: int
    xb: int

    @property
    def layout(self) -> tuple[int, ...]:
        """Tiles with the same window size and the tile at the same place in it filter as one batch."""
        window = (self.yb - self.ya, self.xb - self.xa)
        return (*window, self.y0 - self.ya, self.x0 - self.xa, self.y1 - self.y0, self.x1 - self.x0)


def refine_edges(rgb: Tensor, alpha: Tensor, r: int, settings: Refinement) -> Tensor:
    """Guided filter on the edge tiles only; each tile is filtered with a 2r margin of context, which
    makes its result equal to filtering the whole picture (a pixel depends on pixels within 2r).

    Tiles of the same layout (all but those at the picture's border share one) are filtered as one
    batch, up to TILES_PER_CALL at a time: the filter is a few dozen small kernels, which one tile at
    a time launched once a tile (the tiles' results are the same either way:
    tests/unit/test_matte_inspyrenet_pipeline.py).
    """
    _, _, h, w = alpha.shape
    margin = 2 * r
    out = alpha.clone()
    layouts: dict[tuple[int, ...], list[_Tile]] = {}
    for y0, x0 in edge_tiles(alpha, settings.tile, margin, settings.edge_margin):
        y1, x1 = min(y0 + settings.tile, h), min(x0 + settings.tile, w)
        tile = _Tile(y0, x0, y1, x1, max(y0 - margin, 0), max(x0 - margin, 0), min(y1 + margin, h), min(x1 + margin, w))
        layouts.setdefault(tile.layout, []).append(tile)
    per_call = TILES_PER_CALL.get(alpha.device.type, TILES_PER_CALL["cpu"])
    for (_, _, dy, dx, th, tw), tiles in layouts.items():
        for start in range(0, len(tiles), per_call):
            batch = tiles[start : start + per_call]
            guide = torch.stack([rgb[t.ya : t.yb, t.xa : t.xb] for t in batch]).permute(0, 3, 1, 2).float() / 255.0
            p = torch.cat([alpha[:, :, t.ya : t.yb, t.xa : t.xb] for t in batch])
            q = guided_filter(guide, p, r, settings.eps)[:, :, dy : dy + th, dx : dx + tw].clamp(0.0, 1.0)
            for k, t in enumerate(batch):
                out[:, :, t.y0 : t.y1, t.x0 : t.x1] = q[k : k + 1]
    return out
