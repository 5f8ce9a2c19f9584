"""Mask comparisons the tests and benchmarks share: one IoU, and all pairs' IoUs at once (a Python
double loop over hundreds of full-size masks takes minutes; thousands, hours)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch

CHUNK_BYTES = 1 << 29  # rows flattened at once, as float32
# Issue 19's bar for a u2netp engine that is not byte-identical to rembg (openvino): the matte within
# 1/255, and the >0.5 masks the same to four decimals of IoU (a pixel at 127/128 may cross the threshold).
NEAR_MATTE_MAX_DIFF = 1
NEAR_MASK_MIN_IOU = 0.99995


def iou(a: npt.NDArray[np.bool_], b: npt.NDArray[np.bool_]) -> float:
    """Intersection over union of two boolean masks; two empty masks agree (1.0)."""
    union = int(np.logical_or(a, b).sum())
    return 1.0 if union == 0 else int(np.logical_and(a, b).sum()) / union


def iou_matrix(
    rows: Sequence[npt.NDArray[np.bool_]], columns: Sequence[npt.NDArray[np.bool_]], device: str = "cpu"
) -> npt.NDArray[np.float64]:
    """IoU of every row mask with every column mask (len(rows) x len(columns)), by products of
    the flattened masks on `device` (a GPU takes thousands of 1024x768 masks in a second). The
    intersections are exact: float32 sums of 0/1 are exact below 2**24 pixels a mask."""
    if not rows or not columns:
        return np.zeros((len(rows), len(columns)))
    pixels = int(np.asarray(rows[0]).size)
    assert pixels < 1 << 24, "float32 counts are exact below 2**24 pixels"

    def flat(masks: Sequence[npt.NDArray[np.bool_]]) -> torch.Tensor:
        stacked = np.stack([np.asarray(m, dtype=bool).ravel() for m in masks])
        return torch.from_numpy(stacked).to(device).float()

    b = flat(columns)
    b_area = b.sum(dim=1, dtype=torch.float64)
    out = np.empty((len(rows), len(columns)))
    step = max(1, CHUNK_BYTES // (4 * pixels))
    for start in range(0, len(rows), step):
        a = flat(rows[start : start + step])
        inter = torch.round(a @ b.T).double()
        union = a.sum(dim=1, dtype=torch.float64)[:, None] + b_area[None, :] - inter
        ious = torch.where(union == 0, torch.ones_like(union), inter / union.clamp(min=1.0))
        out[start : start + len(a)] = ious.cpu().numpy()
    return out
