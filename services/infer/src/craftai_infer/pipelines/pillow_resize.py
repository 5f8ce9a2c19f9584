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

Pillow's Lanczos resize (`LANCZOS`, what rembg's pre- and post-processing run:
craftai_infer.pipelines.matte_u2netp_torch) is restated the same way, for the Pillow installed
(13.0.0) as it answers `Image.fromarray(x).resize((w, h), LANCZOS)` for RGB and L pictures:

- the filter: sinc(x)·sinc(x/3) on −3 <= x < 3 (0 elsewhere), sinc(x) = sin(πx)/(πx) and 1 at 0,
  in C doubles; `math.sin` here (the C library's `sin`, which Pillow calls; numpy's vectorised
  `sin` may differ in the last bit). Support 3·max(scale, 1), the same centres and bounds as above,
  the taps summed in order and each divided by the sum where it is not 0;
- fixed point: a weight w >= 0 becomes (int)(w·2²² + ½), a negative one (int)(w·2²² − ½), both
  truncated toward zero: negative weights round half away from zero, not half up as the bilinear
  ones (which are never negative) do;
- each pass: (2²¹ + Σ pixel·weight) >> 22 in int32, clipped to [0, 255] (Pillow's table covers
  −640..639 after the shift, which the sums never leave);
- the pass order: Pillow 13 runs the vertical pass first when the height shrinks and loses more
  than twice as many pixels as the width, in_h − out_h > 0 and in_h − out_h > 2·(in_w − out_w)
  (integers; a width that grows counts as a negative loss), else the horizontal pass first, and
  skips a pass whose axis keeps its size.
  Read from the installed library's machine code (`ImagingResample`: the source of its release
  was not to be had; Pillow's pull request 9549 "If height is scaled down significantly more than
  width, resize vertically first") and checked on every shape pair of a grid of sizes from 1 to
  128 px (tests/unit/test_pillow_lanczos.py). The horizontal-first pass computes only the rows the
  vertical pass reads (`ybox_first`..`ybox_last`); without a box that is every row, so nothing
  is cropped here.

The pass order follows the Pillow installed, as rembg's steps do: every release through 12 runs the
width first whatever the sizes. Which one is installed is not read from its version number but
asked of it once (`installed_pillow_may_run_height_first`: one small resize that the two orders
answer differently), and an installed Pillow that answers neither way is refused.

Not restated: a `box`, `reducing_gap` and RGBA (Pillow premultiplies the alpha first: refused here).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import PIL
import torch
from PIL import Image
from torch import Tensor

PRECISION_BITS = 22  # Pillow's fixed point for 8-bit pictures: 32 bits − 8 of pixel − 2 of headroom
SUPPORT = 1.0  # the triangle (bilinear) filter's half-width
LANCZOS_SUPPORT = 3.0  # the truncated sinc's half-width

__all__ = [
    "bilinear_weights",
    "installed_pillow_may_run_height_first",
    "lanczos_coefficients",
    "lanczos_vertical_first",
    "lanczos_weights",
    "resample_pass",
    "resize_bilinear_u8",
    "resize_by_passes",
    "resize_lanczos_by_passes",
    "resize_lanczos_u8",
    "to_fixed_point",
]


def _taps(
    in_size: int, out_size: int, support: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Pillow's `precompute_coeffs` up to the filter: for each output pixel along an axis, the first
    input pixel it reads (out_size,), which of its taps fall inside the picture (out_size, taps),
    and each tap's distance from the pixel's centre in the filter's units, in double as Pillow
    computes it (the filter widened to the scale when reducing)."""
    scale = float(in_size) / out_size
    filterscale = max(scale, 1.0)
    width = support * filterscale
    taps = math.ceil(width) * 2 + 1
    centre = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    first = np.maximum(np.trunc(centre - width + 0.5), 0).astype(np.int64)  # C's (int): toward zero
    last = np.minimum(np.trunc(centre + width + 0.5).astype(np.int64), in_size)
    offsets = np.arange(taps, dtype=np.int64)
    inside = offsets[None, :] < (last - first)[:, None]
    distance = ((first[:, None] + offsets[None, :]).astype(np.float64) - centre[:, None] + 0.5) * (1.0 / filterscale)
    return first, inside, distance


def _normalised(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each output pixel's weights divided by their sum (summed in order, as the C loop sums them;
    the zeros past the picture change nothing), left as they are where the sum is 0."""
    total = np.zeros(weights.shape[0], dtype=np.float64)
    for k in range(weights.shape[1]):
        total = total + weights[:, k]
    return np.where(total[:, None] != 0.0, weights / np.where(total == 0.0, 1.0, total)[:, None], weights)


@lru_cache(maxsize=64)
def bilinear_weights(in_size: int, out_size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For each output pixel along an axis: the first input pixel it reads, and the fixed-point
    weights of the taps from there, (out_size,) and (out_size, taps) (zero past the picture)."""
    first, inside, distance = _taps(in_size, out_size, SUPPORT)
    weights = _normalised(np.where(inside, np.maximum(1.0 - np.abs(distance), 0.0), 0.0))
    fixed = np.floor(0.5 + weights * float(1 << PRECISION_BITS)).astype(np.int64)  # weights are >= 0
    return first, fixed


def _pass(pixels: Tensor, axis: int, out_size: int) -> Tensor:
    """One 8-bit bilinear pass along `axis` (0: rows, 1: columns) of an (H, W, C) uint8 tensor."""
    if pixels.shape[axis] == out_size:
        return pixels
    first, fixed = bilinear_weights(pixels.shape[axis], out_size)
    return resample_pass(pixels, axis, first, fixed)


def resample_pass(pixels: Tensor, axis: int, first: npt.NDArray[np.int64], fixed: npt.NDArray[np.int64]) -> Tensor:
    """One 8-bit pass of Pillow's along `axis` (0: rows, 1: columns) of an (H, W, C) uint8 tensor,
    with the fixed-point weights given ((out,) first taps and (out, taps) weights, zero past the
    picture): (2²¹ + Σ pixel·weight) >> 22 in int32, clipped to [0, 255]."""
    in_size = pixels.shape[axis]
    out_size = first.shape[0]
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


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x


def _lanczos(x: float) -> float:
    """Pillow's `lanczos_filter`, in the same double operations."""
    if -3.0 <= x < 3.0:
        return _sinc(x) * _sinc(x / 3)
    return 0.0


@lru_cache(maxsize=64)
def lanczos_coefficients(in_size: int, out_size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Pillow's `precompute_coeffs` for the Lanczos filter along an axis: the first input pixel of
    each output pixel (out_size,) and its normalised weights in double (out_size, taps), zero past
    the picture. Computed as Pillow computes them (same operations, same order): the fixed point is
    a rounding of these, where one ulp can move a weight by one."""
    first, inside, distance = _taps(in_size, out_size, LANCZOS_SUPPORT)
    values = np.fromiter(map(_lanczos, distance[inside].tolist()), dtype=np.float64, count=int(inside.sum()))
    weights = np.zeros(distance.shape, dtype=np.float64)
    weights[inside] = values
    return first, _normalised(weights)


def to_fixed_point(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Pillow's `normalize_coeffs_8bpc`: w·2²² rounded half away from zero ((int)(v ± ½), C's
    truncation), the negative weights down and the others up."""
    scaled = weights * float(1 << PRECISION_BITS)
    return np.where(weights < 0, np.trunc(-0.5 + scaled), np.trunc(0.5 + scaled)).astype(np.int64)


@lru_cache(maxsize=64)
def lanczos_weights(in_size: int, out_size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The first input pixel of each output pixel and the fixed-point Lanczos weights along an axis."""
    first, weights = lanczos_coefficients(in_size, out_size)
    return first, to_fixed_point(weights)


def lanczos_vertical_first(height: int, width: int, out_height: int, out_width: int) -> bool:
    """Whether Pillow 13 runs the vertical pass first for this resize (without a box): when the
    height shrinks and loses more than twice as many pixels as the width (a width that grows loses
    a negative number); the same rule for every filter."""
    lost = height - out_height
    return lost > 0 and lost > 2 * (width - out_width)


@lru_cache(maxsize=1)
def installed_pillow_may_run_height_first() -> bool:
    """Whether the installed Pillow runs the vertical pass first where Pillow 13 does (False for the
    releases through 12, which always run the width first), asked of it with one resize of a picture
    on which the two orders answer differently."""
    picture = np.random.default_rng(0).integers(0, 256, (24, 16), dtype=np.uint8)
    answer = np.asarray(Image.fromarray(picture).resize((12, 6), Image.Resampling.LANCZOS))
    grid = torch.from_numpy(picture)
    for height_first in (True, False):
        if np.array_equal(resize_lanczos_by_passes(grid, 6, 12, vertical_first=height_first).numpy(), answer):
            return height_first
    raise RuntimeError(
        f"the installed Pillow {PIL.__version__} resizes with LANCZOS in neither pass order this module "
        "restates: install the Pillow the project pins (constraints.txt)"
    )


def resize_lanczos_by_passes(pixels: Tensor, height: int, width: int, vertical_first: bool | None = None) -> Tensor:
    """The two Lanczos passes in torch, on the pixels' device, in the installed Pillow's order (or
    the order given, for the tests that show the other one differs). (H, W, C) with C 1 or 3, or
    (H, W)."""
    flat = pixels.ndim == 2
    grid = pixels.unsqueeze(2) if flat else pixels
    _check_lanczos(grid, height, width)
    in_height, in_width = grid.shape[0], grid.shape[1]
    if vertical_first is None:
        vertical_first = installed_pillow_may_run_height_first() and lanczos_vertical_first(
            in_height, in_width, height, width
        )
    order = ((0, height), (1, width)) if vertical_first else ((1, width), (0, height))
    out = grid
    for axis, size in order:
        if out.shape[axis] != size:
            first, fixed = lanczos_weights(out.shape[axis], size)
            out = resample_pass(out, axis, first, fixed)
    if out is grid:
        out = grid.clone()
    return out[:, :, 0] if flat else out


def resize_lanczos_u8(pixels: Tensor, height: int, width: int) -> Tensor:
    """(H, W, C) uint8 (C 1 or 3) or (H, W) on any device -> the same at (height, width): Pillow's
    `Image.resize((width, height), LANCZOS)` of the same picture, bit for bit. On the CPU, Pillow
    itself; on a GPU, the torch passes."""
    if pixels.device.type != "cpu":
        return resize_lanczos_by_passes(pixels, height, width)
    _check_lanczos(pixels.unsqueeze(2) if pixels.ndim == 2 else pixels, height, width)
    array = np.ascontiguousarray(pixels.numpy())
    picture = Image.fromarray(array[:, :, 0] if array.ndim == 3 and array.shape[2] == 1 else array)
    out = np.asarray(picture.resize((width, height), Image.Resampling.LANCZOS)).copy()
    return torch.from_numpy(out.reshape(height, width, *pixels.shape[2:]))


def _check_lanczos(pixels: Tensor, height: int, width: int) -> None:
    if pixels.dtype != torch.uint8 or pixels.ndim != 3 or pixels.shape[2] not in (1, 3):
        raise ValueError(
            f"expected an (H, W), (H, W, 1) or (H, W, 3) uint8 picture (Pillow resizes RGBA premultiplied), "
            f"got {pixels.dtype} {tuple(pixels.shape)}"
        )
    if height < 1 or width < 1:
        raise ValueError(f"cannot resize to {width}x{height}")
