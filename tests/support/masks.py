"""Mask comparisons the tests share: one IoU, and all pairs' IoUs at once (a Python double loop over
hundreds of full-size masks takes minutes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def iou(a: npt.NDArray[np.bool_], b: npt.NDArray[np.bool_]) -> float:
    """Intersection over union of two boolean masks; two empty masks agree (1.0)."""
    union = int(np.logical_or(a, b).sum())
    return 1.0 if union == 0 else int(np.logical_and(a, b).sum()) / union


def iou_matrix(
    rows: Sequence[npt.NDArray[np.bool_]], columns: Sequence[npt.NDArray[np.bool_]]
) -> npt.NDArray[np.float64]:
    """IoU of every row mask with every column mask (len(rows) x len(columns)), by one product of
    the flattened masks: the intersections are exact (float64 sums of 0/1 below 2**53)."""
    if not rows or not columns:
        return np.zeros((len(rows), len(columns)))
    a = np.stack([np.asarray(m, dtype=bool).ravel() for m in rows]).astype(np.float32)
    b = np.stack([np.asarray(m, dtype=bool).ravel() for m in columns]).astype(np.float32)
    inter = np.rint(a @ b.T).astype(np.float64)  # float32 counts are exact below 2**24 pixels
    union = a.sum(axis=1, dtype=np.float64)[:, None] + b.sum(axis=1, dtype=np.float64)[None, :] - inter
    return np.where(union == 0, 1.0, inter / np.maximum(union, 1.0))
