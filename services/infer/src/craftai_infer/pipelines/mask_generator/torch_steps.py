"""Segment everything on torch: steps 2-3 of the generator on the device.

The same answer as generator.py `batch_candidates` (the numpy route's), computed where the
decoder's outputs are: the masks that pass the IoU filter are upscaled to the picture's size a
chunk at a time (at most `CHUNK_BYTES` of float logits), their stability scores, thresholds,
Meta's boxes and the positions where each column-major mask changes value are computed there, and
only those positions and a few numbers per mask come back to the host, where they become RLE counts.
`kept_candidates` starts after the IoU filter: for a route that makes only the masks that pass it
(torch_batches.py, the grid in two steps).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from craftai_infer.pipelines.mask_cleanup import clean_logits
from craftai_infer.pipelines.mask_formats import counts_from_changes
from craftai_infer.pipelines.mask_generator.amg import F32, I64, Candidates, stability_score
from craftai_infer.pipelines.mask_generator.generator import Everything, iou_kept, stability_kept
from craftai_infer.pipelines.segment_sam_torch import boxes_of

CHUNK_BYTES = 1 << 30  # float logits at the picture's size held at once


def batch_candidates(
    low_res: torch.Tensor, ious: torch.Tensor, points: F32, height: int, width: int, *, settings: Everything
) -> Candidates:
    """Decoder outputs [N, C, 256, 256] and [N, C] on the device for N points -> the masks kept."""
    n, c = ious.shape
    scores = ious.reshape(n * c).float().cpu().numpy()
    kept = iou_kept(scores, settings)
    if kept.size == 0:
        return Candidates()
    logits = low_res.reshape(n * c, *low_res.shape[-2:]).index_select(0, torch.from_numpy(kept).to(low_res.device))
    return kept_candidates(
        logits,
        kept,
        scores,
        np.repeat(np.asarray(points, np.float32), c, axis=0),
        height=height,
        width=width,
        settings=settings,
    )


def kept_candidates(
    logits: torch.Tensor,
    kept: I64,
    scores: F32,
    origins: F32,
    *,
    height: int,
    width: int,
    settings: Everything,
) -> Candidates:
    """The masks that passed the IoU filter -> those that also pass the stability filter, as
    candidates: `logits` [K, 256, 256] on the device are the masks `kept` [K] (indices into the
    batch's masks, Meta's order), `scores` and `origins` the batch's IoUs and points, one per mask."""
    if settings.cleanup.active:  # 256² per mask: a round trip through the host costs little
        logits = torch.from_numpy(clean_logits(logits.float().cpu().numpy(), settings.cleanup)).to(logits.device)
    t, offset = settings.mask_threshold, settings.stability_score_offset
    chunk = max(1, CHUNK_BYTES // (4 * height * width))
    parts: list[Candidates] = []
    for start in range(0, len(kept), chunk):
        up = F.interpolate(
            logits[start : start + chunk, None].float(), size=(height, width), mode="bilinear", align_corners=False
        )[:, 0]
        inter = (up > t + offset).flatten(1).sum(dim=1)
        union = (up > t - offset).flatten(1).sum(dim=1)
        stability = stability_score(inter.cpu().numpy(), union.cpu().numpy())
        stable = np.flatnonzero(stability_kept(stability, settings))
        if stable.size == 0:
            continue
        masks = up.index_select(0, torch.from_numpy(stable).to(up.device)) > t  # [K, H, W]
        del up
        boxes = boxes_of(masks).cpu().numpy().astype(np.int64)
        columns = masks.transpose(1, 2).reshape(len(stable), -1)  # column-major, as COCO's RLE
        first = columns[:, 0].cpu().numpy()
        where = torch.nonzero(columns[:, 1:] != columns[:, :-1]).cpu().numpy()  # [P, 2]: mask, position
        split = np.searchsorted(where[:, 0], np.arange(len(stable) + 1))
        counts = [
            counts_from_changes(where[split[k] : split[k + 1], 1] + 1, bool(first[k]), height * width)
            for k in range(len(stable))
        ]
        chosen = kept[start + stable]
        parts.append(Candidates(counts, boxes, scores[chosen], stability[stable], origins[chosen]))
    return Candidates.concat(parts)
