"""An independent, slow, obviously correct modulated deformable convolution (DCNv2), written
straight from the formula, to stand in for torchvision.ops.deform_conv2d where torchvision does not
import (the CPU torch here) and to check craftai_models.deform_conv against.

    y[b, o, i, j] = bias[o] + Σ_c Σ_k W[o, c, k] · m[b, k, i, j] · x̃[b, c](py, px)
    py = i·stride − pad + ky·dilation + Δy[b, k, i, j],   px likewise with kx and Δx

x̃ is bilinear interpolation in which each of the four neighbours outside the picture counts as 0
and a point at or beyond one pixel outside (py <= −1, py >= H, ...) gives 0 (torchvision's
bilinear_interpolate). Offset channel 2k is Δy of tap k, 2k+1 its Δx; taps row-major. Every tap is
gathered by explicit integer indexing of the four corners (no grid_sample: a different route
from the project's implementation), one picture and one tap at a time, in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _bilinear(x: Tensor, py: Tensor, px: Tensor) -> Tensor:
    """One picture x (C, H, W) sampled at py/px (N,) -> (C, N)."""
    c, h, w = x.shape
    flat = x.reshape(c, h * w)
    inside = (py > -1) & (py < h) & (px > -1) & (px < w)
    y0, x0 = torch.floor(py), torch.floor(px)
    ly, lx = py - y0, px - x0
    y0, x0 = y0.long(), x0.long()
    total = torch.zeros((c, py.numel()), dtype=x.dtype)
    for dy, wy in ((0, 1 - ly), (1, ly)):
        for dx, wx in ((0, 1 - lx), (1, lx)):
            yy, xx = y0 + dy, x0 + dx
            valid = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            index = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).reshape(-1)
            total += flat[:, index] * (wy * wx * valid.to(x.dtype)).reshape(1, -1)
    return total


def deform_conv2d(  # noqa: PLR0917 (torchvision's signature, positional arguments included)
    input: Tensor,  # torchvision's keyword names, so that callers' keywords work
    offset: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: tuple[int, int] | int = (1, 1),
    padding: tuple[int, int] | int = (0, 0),
    dilation: tuple[int, int] | int = (1, 1),
    mask: Tensor | None = None,
) -> Tensor:
    """torchvision.ops.deform_conv2d's signature and meaning, one offset group, one weight group."""
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    x = input.float()
    b, c, h, w = x.shape
    o, cw, kh, kw = weight.shape
    assert cw == c, "grouped weights are not supported by this reference"
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    assert offset.shape == (b, 2 * kh * kw, ho, wo), "one offset group only"
    modulation = torch.ones((b, kh * kw, ho, wo), dtype=x.dtype) if mask is None else mask.float()
    rows = (torch.arange(ho, dtype=x.dtype) * sh - ph).view(ho, 1)
    cols = (torch.arange(wo, dtype=x.dtype) * sw - pw).view(1, wo)
    out = torch.zeros((b, o, ho * wo), dtype=x.dtype)
    for n in range(b):  # one picture at a time
        for ky in range(kh):
            for kx in range(kw):
                k = ky * kw + kx
                py = (rows + ky * dh + offset[n, 2 * k].float()).reshape(-1)
                px = (cols + kx * dw + offset[n, 2 * k + 1].float()).reshape(-1)
                sampled = _bilinear(x[n], py, px) * modulation[n, k].reshape(1, -1)  # (C, Ho·Wo)
                out[n] += weight[:, :, ky, kx].float() @ sampled
    out = out.view(b, o, ho, wo)
    if bias is not None:
        out += bias.float().view(1, o, 1, 1)
    return out.to(input.dtype)
