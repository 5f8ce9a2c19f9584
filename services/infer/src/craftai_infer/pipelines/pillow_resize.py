"""Pillow's bilinear resize of an 8-bit picture, bit for bit, on a torch tensor on any device.

What torchvision's `Resize` does to a PIL picture (it hands it to Pillow's `Image.resize`), which is
how BiRefNet's authors feed their network (craftai_infer.pipelines.matte_birefnet): where a network
reacts to single grey levels, the same filter in float with one rounding at the end is not the same
input (docs/MATTE.md, "Against the authors' inference").

Pillow's algorithm for 8-bit pictures (its `Resample.c`, restated): two separable passes,
horizontal then vertical, each answering 8-bit values. Horizontal first is the order of every
Pillow release through 12, the ones BiRefNet's authors used; Pillow 13 runs the vertical pass
first for some sizes (where the height shrinks more), which moves about a fifth of the pixels by
one level: this module keeps the authors' order whatever Pillow is installed. Along an axis of n pixels resized to m,
scale = n / m and the filter is widened to max(scale, 1) (antialiasing when reducing); output i is
centred at (i + ½)·scale and takes the input pixels j from ⌊centre − support + ½⌋ to
⌊centre + support + ½⌋ (within the picture) with the triangle filter's weights at
(j − centre + ½) / max(scale, 1), normalised to sum 1 and then turned into fixed point with 22
fractional bits (rounded half up); the pixel is (2²¹ + Σ pixel·weight) >> 22, clipped to [0, 255].
The weights are computed in float64 on the host exactly as Pillow computes them in C doubles
(sequential sums, the same order of operations); the sums run in int32 on the device (at most
255·(2²² + taps) + 2²¹ < 2³¹). On the CPU Pillow itself is called, one axis at a time.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image
from torch import Tensor

PRECISION_BITS = 22  # Pillow's fixed point for 8-bit pictures: 32 bits − 8 of pixel − 2 of headroom
SUPPORT = 1.0  # the triangle (bilinear) filter's half-width

__all__ = ["bilinear_weights", "resize_bilinear_u8", "resize_by_passes"]


@lru_cache(maxsize=64)
def bilinear_weights(in_size: int, out_size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For each output pixel along an axis: the first input pixel it reads, and the fixed-point
    weights of the taps from there, (out_size,) and (out_size, taps) (zero past the picture)."""
    scale = float(in_size) / out_size
    filterscale = max(scale, 1.0)
    support = SUPPORT * filterscale
    taps = math.ceil(support) * 2 + 1
    centre = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    first = np.maximum(np.trunc(centre - support + 0.5), 0).astype(np.int64)  # C's (int): toward zero
    last = np.minimum(np.trunc(centre + support + 0.5).astype(np.int64), in_size)
    count = last - first
    offsets = np.arange(taps, dtype=np.int64)
    distance = ((first[:, None] + offsets[None, :]).astype(np.float64) - centre[:, None] + 0.5) * (1.0 / filterscale)
    weights = np.where(offsets[None, :] < count[:, None], np.maximum(1.0 - np.abs(distance), 0.0), 0.0)
    total = np.zeros(out_size, dtype=np.float64)
    for k in range(taps):  # in order, as the C loop sums them
        total = total + weights[:, k]
    weights = np.where(total[:, None] != 0.0, weights / np.where(total == 0.0, 1.0, total)[:, None], weights)
    fixed = np.floor(0.5 + weights * float(1 << PRECISION_BITS)).astype(np.int64)  # weights are >= 0
    return first, fixed


def _pass(pixels: Tensor, axis: int, out_size: int) -> Tensor:
    """One 8-bit pass along `axis` (0: rows, 1: columns) of an (H, W, C) uint8 tensor."""
    in_size = pixels.shape[axis]
    if in_size == out_size:
        return pixels
    first, fixed = bilinear_weights(in_size, out_size)
    device = pixels.device
    starts = torch.from_numpy(first).to(device)
    weights = torch.from_numpy(fixed.astype(np.int32)).to(device)
    shape = [1, 1, 1]
    shape[axis] = out_size
    out_shape = list(pixels.shape)
    out_shape[axis] = out_size
    total = torch.full(out_shape, 1 << (PRECISION_BITS - 1), dtype=torch.int32, device=device)
    for k in range(fixed.shape[1]):
        taps = pixels.index_select(axis, (starts + k).clamp(max=in_size - 1)).to(torch.int32)
        total += taps * weights[:, k].view(shape)
    return (total >> PRECISION_BITS).clamp(0, 255).to(torch.uint8)


def resize_by_passes(pixels: Tensor, height: int, width: int) -> Tensor:
    """The two passes in torch, on the pixels' device (what `resize_bilinear_u8` runs off the CPU)."""
    _check(pixels, height, width)
    return _pass(_pass(pixels, 1, width), 0, height)


def resize_bilinear_u8(pixels: Tensor, height: int, width: int) -> Tensor:
    """(H, W, C) uint8 on any device -> (height, width, C) uint8: Pillow's `Image.resize((width,
    height), BILINEAR)` of the same picture as Pillow up to 12 makes it, bit for bit (the width
    first). On the CPU, Pillow itself runs the two passes, one resize of one axis each (a tenth of
    the torch passes' time there); on a GPU, the torch passes."""
    _check(pixels, height, width)
    if pixels.device.type != "cpu":
        return resize_by_passes(pixels, height, width)
    picture = Image.fromarray(np.ascontiguousarray(pixels.numpy()))
    wide = picture.resize((width, picture.height), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.asarray(wide.resize((width, height), Image.Resampling.BILINEAR)).copy())


def _check(pixels: Tensor, height: int, width: int) -> None:
    if pixels.dtype != torch.uint8 or pixels.ndim != 3 or pixels.shape[2] not in (1, 3, 4):
        raise ValueError(f"expected an (H, W, C) uint8 picture, got {pixels.dtype} {tuple(pixels.shape)}")
    if height < 1 or width < 1:
        raise ValueError(f"cannot resize to {width}x{height}")
