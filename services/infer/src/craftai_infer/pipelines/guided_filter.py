"""Colour guided filter (He, Sun, Tang, "Guided Image Filtering", PAMI 2013), in torch (CPU or GPU).

For a colour guide I (3 channels) and a one-channel input p, in every window ω_k of radius r
(the (2r+1)² square centred on pixel k):

    a_k = (Σ_k + ε U)⁻¹ (mean_ω(I p) − μ_k p̄_k)        Σ_k: 3×3 covariance of I in ω_k, μ_k its mean
    b_k = p̄_k − a_kᵀ μ_k
    q_i = ā_iᵀ I_i + b̄_i                                ā, b̄: means of a, b over the windows holding i

Units: r in pixels of the picture the filter runs on; ε in the guide's units squared, with I in
[0, 1] (ε = 1e-4 means "colour differences of about 0.01, i.e. 2.5/255, count as edges").
Border rule: windows are clipped to the picture and every mean is taken over the pixels inside
(He's reference code divides box sums by N = boxfilter(ones)); no padding values are invented.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["box_mean", "guided_filter"]


def _clipped_mean_along(x: Tensor, r: int, dim: int) -> Tensor:
    """Mean over [i − r, i + r] ∩ [0, n) along `dim`, from running sums: O(1) per pixel whatever r."""
    n = x.shape[dim]
    running = F.pad(x.cumsum(dim), (1, 0) if dim == -1 else (0, 0, 1, 0))  # running[k] = sum of the first k
    index = torch.arange(n, device=x.device)
    hi = (index + r + 1).clamp(max=n)
    lo = (index - r).clamp(min=0)
    sums = running.index_select(dim, hi) - running.index_select(dim, lo)
    counts = (hi - lo).to(x.dtype)
    return sums / (counts if dim == -1 else counts[:, None])


def box_mean(x: Tensor, r: int) -> Tensor:
    """Mean over the (2r+1)² window clipped to the picture, per channel: (B, C, H, W) -> same shape.

    Separable (a clipped window is a rectangle, so the mean of the valid row means is exact);
    running sums in float64, so long rows lose no precision in float32 pictures.
    """
    if r < 0:
        raise ValueError("radius must be >= 0")
    if r == 0:
        return x
    mean = _clipped_mean_along(_clipped_mean_along(x.double(), r, -1), r, -2)
    return mean.to(x.dtype)


def guided_filter(guide: Tensor, p: Tensor, r: int, eps: float) -> Tensor:
    """Filter p (B, 1, H, W) guided by a colour picture (B, 3, H, W) in [0, 1]; float32 or float64.

    The guide is centred on its own mean first (the filter is invariant to that shift, and it keeps
    the E[I Iᵀ] − μ μᵀ cancellation small in float32).
    """
    if guide.shape[1] != 3 or p.shape[1] != 1 or guide.shape[-2:] != p.shape[-2:]:
        raise ValueError(f"expected guide (B, 3, H, W) and p (B, 1, H, W), got {tuple(guide.shape)}, {tuple(p.shape)}")
    if eps <= 0:
        raise ValueError("eps must be > 0 (it keeps Σ + εU invertible)")
    guide = guide - guide.mean(dim=(2, 3), keepdim=True)
    red, green, blue = guide[:, 0:1], guide[:, 1:2], guide[:, 2:3]
    stacked = torch.cat(
        [guide, p, guide * p, red * red, red * green, red * blue, green * green, green * blue, blue * blue], dim=1
    )
    means = box_mean(stacked, r)
    mu = means[:, 0:3]  # (B, 3, H, W)
    p_mean = means[:, 3:4]
    cov_ip = means[:, 4:7] - mu * p_mean  # (B, 3, H, W)
    mr, mg, mb = mu[:, 0:1], mu[:, 1:2], mu[:, 2:3]
    # Σ + εU, symmetric: [[rr, rg, rb], [rg, gg, gb], [rb, gb, bb]]
    rr = means[:, 7:8] - mr * mr + eps
    rg = means[:, 8:9] - mr * mg
    rb = means[:, 9:10] - mr * mb
    gg = means[:, 10:11] - mg * mg + eps
    gb = means[:, 11:12] - mg * mb
    bb = means[:, 12:13] - mb * mb + eps
    # Inverse by cofactors (the matrix is symmetric positive definite: det >= eps³ > 0).
    c_rr = gg * bb - gb * gb
    c_rg = rb * gb - rg * bb
    c_rb = rg * gb - rb * gg
    c_gg = rr * bb - rb * rb
    c_gb = rb * rg - rr * gb
    c_bb = rr * gg - rg * rg
    det = rr * c_rr + rg * c_rg + rb * c_rb
    cr, cg, cb = cov_ip[:, 0:1], cov_ip[:, 1:2], cov_ip[:, 2:3]
    a = (
        torch.cat(
            [c_rr * cr + c_rg * cg + c_rb * cb, c_rg * cr + c_gg * cg + c_gb * cb, c_rb * cr + c_gb * cg + c_bb * cb],
            dim=1,
        )
        / det
    )  # (B, 3, H, W)
    b = p_mean - (a * mu).sum(dim=1, keepdim=True)  # (B, 1, H, W)
    ab = box_mean(torch.cat([a, b], dim=1), r)
    return (ab[:, 0:3] * guide).sum(dim=1, keepdim=True) + ab[:, 3:4]
