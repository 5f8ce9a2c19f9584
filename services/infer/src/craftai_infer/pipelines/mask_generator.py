"""Segment everything: the automatic mask generator of Meta's `SAM2AutomaticMaskGenerator`, for
one crop layer (the whole picture), as pure functions.

Meta's steps, with its parameters and defaults (`Everything`):

1. a grid of points_per_side² points, each a single foreground click: the centres of an even
   grid over [0, 1]², times (width, height) (`grid_points`);
2. the decoder on points_per_batch points at a time, its three masks per point (multimask);
   with min_mask_region_area > 0, Meta's clean-up of the low-res logits
   (craftai_infer.pipelines.mask_cleanup, max_hole_area = max_sprinkle_area = that area: what
   Meta's generator passes its predictor);
3. per mask: kept when its predicted IoU is above pred_iou_thresh, then when its stability score
   (the IoU of the logits upscaled to the picture's size thresholded at mask_threshold +- offset)
   is at least stability_score_thresh; then thresholded at mask_threshold; its box (Meta's:
   first and last pixel, both included) and its run-length encoding kept (`Candidates`);
4. non-maximum suppression on those boxes by predicted IoU at box_nms_thresh (`select`): the
   masks answered, best predicted IoU first.

Meta's generator defines a full-resolution small-region removal (`postprocess_small_regions`)
but never calls it; min_mask_region_area acts through the low-res clean-up alone, and so here.
Steps 2-3 run where the route's tensors are: this module's `batch_candidates` for numpy routes,
craftai_infer.pipelines.mask_generator_torch for torch routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup, clean_logits
from craftai_infer.pipelines.mask_formats import rle_counts
from craftai_infer.pipelines.segment_sam import upscale_logits

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Everything:
    """Meta's SAM2AutomaticMaskGenerator parameters that apply to one crop layer, its defaults."""

    points_per_side: int = 32
    points_per_batch: int = 64
    pred_iou_thresh: float = 0.8
    stability_score_thresh: float = 0.95
    stability_score_offset: float = 1.0
    mask_threshold: float = 0.0
    box_nms_thresh: float = 0.7
    min_mask_region_area: int = 0
    multimask_output: bool = True

    @property
    def cleanup(self) -> Cleanup:
        """Meta's generator gives its predictor max_hole_area = max_sprinkle_area = min_mask_region_area."""
        area = self.min_mask_region_area
        return Cleanup(area, area) if area > 0 else NO_CLEANUP


def point_grid(points_per_side: int) -> npt.NDArray[np.float64]:
    """[n², 2] (x, y) in [0, 1]: the centres of an n x n grid, row by row (Meta's build_point_grid)."""
    offset = 1 / (2 * points_per_side)
    side = np.linspace(offset, 1 - offset, points_per_side)
    xs = np.tile(side[None, :], (points_per_side, 1))
    ys = np.tile(side[:, None], (1, points_per_side))
    return np.stack([xs, ys], axis=-1).reshape(-1, 2)


def grid_points(points_per_side: int, height: int, width: int) -> F32:
    """The grid in picture pixels, float32 as Meta hands it to the predictor."""
    scaled: F32 = (point_grid(points_per_side) * np.array([[width, height]])).astype(np.float32)
    return scaled


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


def iou_kept(ious: F32, settings: Everything) -> I64:
    """Indices of the masks whose predicted IoU is above the threshold (compared in float32, as Meta's tensors)."""
    if settings.pred_iou_thresh <= 0.0:
        return np.arange(len(ious), dtype=np.int64)
    return np.flatnonzero(np.asarray(ious, np.float32) > np.float32(settings.pred_iou_thresh)).astype(np.int64)


def stability_kept(scores: F32, settings: Everything) -> Bool:
    if settings.stability_score_thresh <= 0.0:
        return np.ones(len(scores), dtype=np.bool_)
    return np.asarray(scores >= np.float32(settings.stability_score_thresh))


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


def batch_candidates(
    low_res: F32, ious: F32, points: F32, height: int, width: int, *, settings: Everything
) -> Candidates:
    """Steps 2-3 for one batch on the host: decoder outputs [N, C, 256, 256] and [N, C] for the
    batch's N points -> the masks kept, one upscaled at a time."""
    logits, scores, origins = flatten(np.asarray(low_res, np.float32), np.asarray(ious, np.float32), points)
    kept = iou_kept(scores, settings)
    cleaned = clean_logits(logits[kept], settings.cleanup)
    t, offset = settings.mask_threshold, settings.stability_score_offset
    found: list[tuple[int, I64, npt.NDArray[np.int64], float]] = []
    for index, one in zip(kept, cleaned, strict=True):
        up = upscale_logits(one, height, width)
        inter = np.count_nonzero(up > np.float32(t + offset))
        union = np.count_nonzero(up > np.float32(t - offset))
        stability = float(stability_score(np.array([inter]), np.array([union]))[0])
        if not stability_kept(np.array([stability], np.float32), settings)[0]:
            continue
        mask = up > np.float32(t)
        found.append((int(index), rle_counts(mask), meta_box(mask), stability))
    chosen = np.array([f[0] for f in found], np.int64)
    return Candidates(
        [f[1] for f in found],
        np.array([f[2] for f in found], np.int64).reshape(-1, 4),
        scores[chosen].astype(np.float32),
        np.array([f[3] for f in found], np.float32),
        origins[chosen].reshape(-1, 2),
    )


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


def select(candidates: Candidates, settings: Everything) -> Candidates:
    """Step 4: the candidates left by box NMS, best predicted IoU first."""
    if len(candidates) == 0:
        return candidates
    return candidates.take(nms(candidates.boxes, candidates.ious, settings.box_nms_thresh))
