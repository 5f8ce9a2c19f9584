"""The generator's parameters (`Everything`) and its steps on the host, Meta's
`SAM2AutomaticMaskGenerator` for one crop layer: step 1 `grid_points`, steps 2-3 for a batch of
decoder outputs in numpy `batch_candidates` (the onnxruntime route's), step 4 `select`. The
package's docstring (craftai_infer.pipelines.mask_generator) says what each step does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup, clean_logits
from craftai_infer.pipelines.mask_formats import rle_counts
from craftai_infer.pipelines.mask_generator.amg import (
    F32,
    I64,
    Bool,
    Candidates,
    flatten,
    meta_box,
    nms,
    point_grid,
    stability_score,
)
from craftai_infer.pipelines.segment_sam import upscale_logits


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


def grid_points(points_per_side: int, height: int, width: int) -> F32:
    """The grid in picture pixels, float32 as Meta hands it to the predictor."""
    scaled: F32 = (point_grid(points_per_side) * np.array([[width, height]])).astype(np.float32)
    return scaled


def iou_kept(ious: F32, settings: Everything) -> I64:
    """Indices of the masks whose predicted IoU is above the threshold (compared in float32, as Meta's tensors)."""
    if settings.pred_iou_thresh <= 0.0:
        return np.arange(len(ious), dtype=np.int64)
    return np.flatnonzero(np.asarray(ious, np.float32) > np.float32(settings.pred_iou_thresh)).astype(np.int64)


def stability_kept(scores: F32, settings: Everything) -> Bool:
    if settings.stability_score_thresh <= 0.0:
        return np.ones(len(scores), dtype=np.bool_)
    return np.asarray(scores >= np.float32(settings.stability_score_thresh))


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


def select(candidates: Candidates, settings: Everything) -> Candidates:
    """Step 4: the candidates left by box NMS, best predicted IoU first."""
    if len(candidates) == 0:
        return candidates
    return candidates.take(nms(candidates.boxes, candidates.ious, settings.box_nms_thresh))
