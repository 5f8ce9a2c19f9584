"""The automatic mask generator's helpers over arrays, as Meta's `sam2/utils/amg.py` has them: the
point grid, batches, the masks kept (`Candidates`, Meta's `MaskData` for one crop layer), the
stability score, Meta's boxes and the box NMS. Pure numpy; the generator's steps are generator.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]


def point_grid(points_per_side: int) -> npt.NDArray[np.float64]:
    """[n², 2] (x, y) in [0, 1]: the centres of an n x n grid, row by row (Meta's build_point_grid)."""
    offset = 1 / (2 * points_per_side)
    side = np.linspace(offset, 1 - offset, points_per_side)
    xs = np.tile(side[None, :], (points_per_side, 1))
    ys = np.tile(side[:, None], (1, points_per_side))
    return np.stack([xs, ys], axis=-1).reshape(-1, 2)


def batches(points: F32, size: int) -> list[F32]:
    return [points[i : i + size] for i in range(0, len(points), size)]


@dataclass(frozen=True, eq=False)
class Candidates:
    """Masks that passed the filters: RLE counts (craftai_infer.pipelines.mask_formats), Meta's
    boxes [M, 4] (x0, y0, x1, y1 with the last pixel included), predicted IoUs, stability scores,
    and the point that made each."""

    counts: list[I64] = field(default_factory=list)
    boxes: I64 = field(default_factory=lambda: np.zeros((0, 4), np.int64))
    ious: F32 = field(default_factory=lambda: np.zeros(0, np.float32))
    stability: F32 = field(default_factory=lambda: np.zeros(0, np.float32))
    points: F32 = field(default_factory=lambda: np.zeros((0, 2), np.float32))

    def __len__(self) -> int:
        return len(self.counts)

    def take(self, indices: Sequence[int] | I64) -> Candidates:
        chosen = np.asarray(indices, dtype=np.int64)
        return Candidates(
            [self.counts[i] for i in chosen],
            self.boxes[chosen],
            self.ious[chosen],
            self.stability[chosen],
            self.points[chosen],
        )

    @staticmethod
    def concat(parts: Sequence[Candidates]) -> Candidates:
        if not parts:
            return Candidates()
        return Candidates(
            [c for p in parts for c in p.counts],
            np.concatenate([p.boxes for p in parts]).astype(np.int64),
            np.concatenate([p.ious for p in parts]).astype(np.float32),
            np.concatenate([p.stability for p in parts]).astype(np.float32),
            np.concatenate([p.points for p in parts]).astype(np.float32),
        )


def flatten(low_res: F32, ious: F32, points: F32) -> tuple[F32, F32, F32]:
    """Decoder outputs [N, C, 256, 256] and [N, C] for N points -> [N*C, ...] with each mask's point
    (Meta's order: the C masks of point 0, then of point 1, ...)."""
    n, c = ious.shape
    return (
        low_res.reshape(n * c, *low_res.shape[-2:]),
        ious.reshape(n * c),
        np.repeat(np.asarray(points, np.float32), c, axis=0),
    )


def stability_score(intersections: I64, unions: I64) -> F32:
    """IoU of the masks at threshold + offset and threshold - offset (the first is inside the
    second), as Meta's float32 division of integer counts (NaN for an empty union: never kept)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        scores: F32 = np.divide(np.asarray(intersections, np.float32), np.asarray(unions, np.float32))
    return scores


def meta_box(mask: Bool) -> npt.NDArray[np.int64]:
    """Meta's batched_mask_to_box for one mask: x0, y0, x1, y1 with the last pixel included; zeros when empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return np.zeros(4, np.int64)
    cols = np.flatnonzero(mask.any(axis=0))
    return np.array([cols[0], rows[0], cols[-1], rows[-1]], np.int64)


def nms(boxes: I64, scores: F32, threshold: float) -> I64:
    """Greedy non-maximum suppression, torchvision's `nms` semantics: best score first (ties in
    order), a box dropped when its IoU with a kept one is above `threshold`; areas are
    (x1 - x0) * (y1 - y0) of the boxes as given, IoUs in float32, compared in float64."""
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    b = np.asarray(boxes, np.float32)[order]
    areas = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    suppressed = np.zeros(len(b), dtype=np.bool_)
    keep = []
    for i in range(len(b)):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = np.arange(i + 1, len(b))
        rest = rest[~suppressed[rest]]
        if rest.size == 0:
            continue
        w = np.maximum(np.float32(0), np.minimum(b[i, 2], b[rest, 2]) - np.maximum(b[i, 0], b[rest, 0]))
        h = np.maximum(np.float32(0), np.minimum(b[i, 3], b[rest, 3]) - np.maximum(b[i, 1], b[rest, 1]))
        inter = (w * h).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            overlap = (inter / (areas[i] + areas[rest] - inter)).astype(np.float32)
        suppressed[rest[overlap.astype(np.float64) > threshold]] = True
    return order[np.array(keep, dtype=np.int64)].astype(np.int64)
