"""Modulated deformable convolution (DCNv2: Zhu et al., "Deformable ConvNets v2", CVPR 2019), in
plain PyTorch, with memory bounded by one kernel row at a time.

For output pixel p and kernel tap k (position p_k on the regular grid), with learnt offsets Δp_k and
modulation m_k (BiRefNet: 2·sigmoid of a convolution, so in (0, 2)):

    y(p) = b + Σ_k W_k · m_k(p) · x(p + p_k + Δp_k)

where x(q) at a fractional q is bilinear between the four neighbouring pixels, a neighbour outside
the picture counting as zero (torchvision.ops.deform_conv2d's convention). Offsets are laid out as
torchvision's: channel 2k is Δy of tap k, 2k+1 its Δx, taps in row-major order.

Why not torchvision: it does not import beside the CPU torch here. Why not the im2col of the
sampled columns: at BiRefNet_lite's 1024² input the 7×7 branch at /4 would hold 64·49 columns of
256² pixels (over 800 MB) per call, several such calls in flight. Here each kernel row's taps are
sampled with one `grid_sample` (bilinear, zero padding), weighted by their modulation and reduced
by one matrix product into the output, so the temporary is one row of taps (kw columns per input
channel), never the whole kernel.

Stride 1, dilation 1, one offset group and one weight group: what BiRefNet uses (others refused).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["deform_conv2d"]


def _taps_grid(offset_row: Tensor, row: int, kw: int, pad: tuple[int, int], size: tuple[int, int]) -> Tensor:
    """Sampling grid of one kernel row's kw taps for grid_sample: (B, kw·Ho, Wo, 2) as (x, y) in
    grid_sample's align_corners=False units (pixel q ↔ (2q + 1) / size − 1, exact for any size ≥ 1)."""
    b, _, ho, wo = offset_row.shape
    h, w = size
    device, dtype = offset_row.device, offset_row.dtype
    dy = offset_row[:, 0::2]  # (B, kw, Ho, Wo)
    dx = offset_row[:, 1::2]
    ys = torch.arange(ho, device=device, dtype=dtype).view(1, 1, ho, 1) + float(row - pad[0])
    xs = torch.arange(wo, device=device, dtype=dtype).view(1, 1, 1, wo) - float(pad[1])
    taps = torch.arange(kw, device=device, dtype=dtype).view(1, kw, 1, 1)
    gy = (2.0 * (ys + dy) + 1.0) / h - 1.0
    gx = (2.0 * (xs + taps + dx) + 1.0) / w - 1.0
    return torch.stack((gx, gy), dim=-1).reshape(b, kw * ho, wo, 2)


def deform_conv2d(
    x: Tensor,
    offset: Tensor,
    mask: Tensor,
    weight: Tensor,
    *,
    bias: Tensor | None = None,
    padding: tuple[int, int] = (0, 0),
) -> Tensor:
    """x (B, C, H, W), offset (B, 2·kh·kw, Ho, Wo), mask (B, kh·kw, Ho, Wo), weight (O, C, kh, kw)
    -> (B, O, Ho, Wo) float32, Ho = H + 2·pad_h − kh + 1 (stride 1, dilation 1).

    Positions and samples are float32 whatever the inputs (bfloat16 cannot hold a sub-pixel
    position at 1024²); the products with the weights follow autocast when it is on (their sum over
    the kernel rows stays float32).
    """
    b, c, h, w = x.shape
    o, cw, kh, kw = weight.shape
    ho, wo = h + 2 * padding[0] - kh + 1, w + 2 * padding[1] - kw + 1
    if cw != c:
        raise ValueError(f"weight expects {cw} input channels, got {c} (grouped weights are not supported)")
    if offset.shape != (b, 2 * kh * kw, ho, wo) or mask.shape != (b, kh * kw, ho, wo):
        raise ValueError(
            f"offset {tuple(offset.shape)} / mask {tuple(mask.shape)} do not fit one offset group of a "
            f"{kh}x{kw} kernel at stride 1 on {h}x{w} (expected (B, {2 * kh * kw}, {ho}, {wo}))"
        )
    source = x.float()
    offset = offset.float()
    out = torch.zeros((b, o, ho * wo), device=x.device, dtype=torch.float32)
    for row in range(kh):
        first = row * kw
        grid = _taps_grid(offset[:, 2 * first : 2 * (first + kw)], row, kw, padding, (h, w))
        sampled = F.grid_sample(source, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        del grid
        sampled = sampled.view(b, c, kw, ho * wo).mul_(mask[:, first : first + kw].reshape(b, 1, kw, ho * wo))
        # (O, C·kw) @ (C·kw, HoWo) per picture: column index c·kw + tap on both sides.
        taps_weight = weight[:, :, row, :].reshape(o, c * kw)
        for n in range(b):
            out[n].add_(torch.mm(taps_weight, sampled[n].view(c * kw, ho * wo)))
        del sampled
    result = out.view(b, o, ho, wo)
    return result if bias is None else result + bias.view(1, o, 1, 1)
