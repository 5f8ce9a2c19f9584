"""Antialiased Lanczos-3 resampling on the device, with Pillow's coefficients.

Pillow's LANCZOS (Resample.c) widens the filter by the reduction factor, so shrinking averages
every source pixel once (antialiasing): for output pixel i, centre c = (i + 0.5) * s with
s = in / out, the taps j in [c - support, c + support) with support = 3 * max(s, 1), weights
L((j - c + 0.5) / max(s, 1)) normalised to sum 1, L(x) = sinc(x) sinc(x / 3) for |x| < 3. Applied
here as two matrix products in float32 (rows, then columns); Pillow also rounds to 8 bits between
the passes, which this does not.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor


def _lanczos(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out = np.sinc(x) * np.sinc(x / 3.0)
    return np.where(np.abs(x) < 3.0, out, 0.0)


@functools.lru_cache(maxsize=32)
def lanczos_matrix(in_size: int, out_size: int) -> npt.NDArray[np.float32]:
    """[out_size, in_size] weights: row i holds output pixel i's taps."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 3.0 * filterscale
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        centre = (i + 0.5) * scale
        lo = max(int(centre - support + 0.5), 0)
        hi = min(int(centre + support + 0.5), in_size)
        taps = np.arange(lo, hi, dtype=np.float64)
        weights = _lanczos((taps - centre + 0.5) / filterscale)
        total = weights.sum()
        matrix[i, lo:hi] = weights / total if total != 0 else 0.0
    return matrix.astype(np.float32)


def resize_lanczos(x: Tensor, height: int, width: int) -> Tensor:
    """(N, C, H, W) float -> (N, C, height, width), separable Lanczos-3 with Pillow's coefficients."""
    rows = torch.from_numpy(lanczos_matrix(x.shape[-2], height)).to(x.device)  # [height, H]
    cols = torch.from_numpy(lanczos_matrix(x.shape[-1], width)).to(x.device)  # [width, W]
    return rows @ x.float() @ cols.T


def reflect_indices(size: int, target: int) -> npt.NDArray[np.int64]:
    """Indices that extend 0..size-1 to `target` by reflection (numpy's "reflect": the edge pixel is
    not repeated; a one-pixel side repeats its pixel); any amount of padding."""
    if size == 1:
        return np.zeros(target, dtype=np.int64)
    period = 2 * (size - 1)
    k = np.arange(target) % period
    return np.where(k < size, k, period - k).astype(np.int64)


def reflect_pad(x: Tensor, height: int, width: int) -> Tensor:
    """(..., H, W) -> (..., height, width), reflect-padded on the bottom and right, on x's device."""
    rows = torch.from_numpy(reflect_indices(x.shape[-2], height)).to(x.device)
    cols = torch.from_numpy(reflect_indices(x.shape[-1], width)).to(x.device)
    return x.index_select(-2, rows).index_select(-1, cols)


__all__ = ["lanczos_matrix", "reflect_indices", "reflect_pad", "resize_lanczos"]
