"""Foreground colour estimation: the multi-level method of Germer, Uelwer, Conrad and Harmeling
("Fast Multi-Level Foreground Estimation", ICPR 2020), as pymatting's `estimate_foreground_ml`
defines it, in torch (CPU or GPU). docs/MATTE.md says why this method and what it measured.

A pixel of a picture is I = α F + (1 − α) B; given I and α, find the foreground colour F (what
the cutout shows where α is partial: hair, fur) and the background colour B. The energy

    Σ_i (α_i F_i + (1 − α_i) B_i − I_i)²  +  Σ_i Σ_{j ∈ N(i)} d_ij (‖F_i − F_j‖² + ‖B_i − B_j‖²),
    d_ij = ε + ω |α_i − α_j|                 (ε = 1e-5, ω = 1; N(i): the 4 neighbours)

is minimised coarse to fine. Levels l = 0..L, L = ⌈log2 max(w, h)⌉, of size (round(w^(l/L)),
round(h^(l/L))); picture and α reduced by nearest neighbour (source index = i · size // level size);
F and B start at level 0 as the mean colour of the pixels with α > 0.9 (F) and α < 0.1 (B) and are
carried to the next level by nearest neighbour. At each level, 10 iterations while both sides are
<= 32 px, else 2. One iteration sets every pixel's (F, B), with its neighbours' values fixed, to the
minimiser of its terms, the 2×2 system

    [α² + Σd    α(1 − α)  ] [F]   [α I       + Σ_j d_ij F_j]
    [α(1 − α)   (1 − α)² + Σd] [B] = [(1 − α) I + Σ_j d_ij B_j],   then clipped to [0, 1].

A border pixel is its own neighbour on the outside (indices clamped), as in pymatting.

The one difference: pymatting updates the pixels one after the other in raster order, each seeing
the new values of those before it (Gauss–Seidel). Here the pixels with x + y even are updated
together, then the others, each half seeing the other's newest values (red–black Gauss–Seidel): the
same equations and fixed point, in an order a GPU can run. The pixels of one colour split into two
sub-lattices by (y mod 2, x mod 2), each a strided view of one padded buffer holding F and B, so an
update reads its four neighbours as views (no copies) and writes only its own pixels.
tests/parity/test_foreground_pymatting.py measures what the order changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["MultiLevel", "estimate_foreground"]


@dataclass(frozen=True)
class MultiLevel:
    """The method's constants (pymatting's defaults)."""

    regularization: float = 1e-5  # ε
    gradient_weight: float = 1.0  # ω
    small_iterations: int = 10  # iterations at the levels whose sides are both <= small_size
    big_iterations: int = 2  # iterations at every other level
    small_size: int = 32


def _nearest(x: Tensor, height: int, width: int) -> Tensor:
    """(N, C, H, W) -> (N, C, height, width): source index i * H // height (pymatting's nearest)."""
    h, w = x.shape[-2:]
    rows = (torch.arange(height, device=x.device) * h // height).clamp(max=h - 1)
    cols = (torch.arange(width, device=x.device) * w // width).clamp(max=w - 1)
    return x.index_select(-2, rows).index_select(-1, cols)


def _refresh_border(padded: Tensor) -> None:
    """The one-pixel frame of the padded buffer repeats the picture's edge (clamped neighbours)."""
    padded[:, :, 0, :] = padded[:, :, 1, :]
    padded[:, :, -1, :] = padded[:, :, -2, :]
    padded[:, :, :, 0] = padded[:, :, :, 1]
    padded[:, :, :, -1] = padded[:, :, :, -2]


class _SubLattice:
    """The pixels (y, x) with y ≡ a and x ≡ b (mod 2) of one level: their constants, and views of the
    padded (1, 6, h + 2, w + 2) buffer of [F, B] at their own place and at their four neighbours'."""

    def __init__(
        self,
        padded: Tensor,
        alpha_padded: Tensor,
        image: Tensor,
        scratch: Tensor,
        *,
        a: int,
        b: int,
        method: MultiLevel,
    ) -> None:
        h, w = image.shape[-2:]
        rows, cols = (h - a + 1) // 2, (w - b + 1) // 2

        def view(x: Tensor, dy: int, dx: int) -> Tensor:  # x padded by one pixel on every side
            y0, x0 = 1 + a + dy, 1 + b + dx
            return x[:, :, y0 : y0 + 2 * rows - 1 : 2, x0 : x0 + 2 * cols - 1 : 2]

        self.own = view(padded, 0, 0)
        self.neighbours = [view(padded, 0, -1), view(padded, 0, 1), view(padded, -1, 0), view(padded, 1, 0)]
        a0 = view(alpha_padded, 0, 0)
        self.weights = [
            method.regularization + method.gradient_weight * (a0 - view(alpha_padded, dy, dx)).abs()
            for dy, dx in ((0, -1), (0, 1), (-1, 0), (1, 0))
        ]  # d_ij, each (1, 1, rows, cols)
        total = self.weights[0] + self.weights[1] + self.weights[2] + self.weights[3]
        a1 = 1.0 - a0
        m00, m01, m11 = a0 * a0 + total, a0 * a1, a1 * a1 + total
        det = m00 * m11 - m01 * m01  # >= (Σd)² > 0
        # The inverse [[m11, −m01], [−m01, m00]] / det: F = i00 b₀ + i01 b₁, B = i01 b₀ + i11 b₁.
        self.i00, self.i01, self.i11 = m11 / det, -m01 / det, m00 / det
        pixels = image[:, :, a::2, b::2]
        self.data = torch.cat([a0 * pixels, a1 * pixels], 1)  # the α I and (1 − α) I terms, (1, 6, rows, cols)
        self.b = scratch[:, :, :rows, :cols]  # one buffer per level, shared by the sub-lattices

    def update(self) -> None:
        """[F, B] of these pixels from their neighbours' newest values, written in place."""
        left, right, up, down = self.neighbours
        d_left, d_right, d_up, d_down = self.weights
        b = torch.addcmul(self.data, d_left, left, out=self.b)
        b.addcmul_(d_right, right).addcmul_(d_up, up).addcmul_(d_down, down)
        b0, b1 = b[:, :3], b[:, 3:]
        fg, bg = self.own[:, :3], self.own[:, 3:]  # the neighbours are of the other colour: not read here
        torch.mul(self.i00, b0, out=fg).addcmul_(self.i01, b1)
        torch.mul(self.i11, b1, out=bg).addcmul_(self.i01, b0)
        self.own.clamp_(0.0, 1.0)


def _level(image: Tensor, alpha: Tensor, start: Tensor, iterations: int, method: MultiLevel) -> Tensor:
    """`iterations` red–black sweeps at one level from `start` ([F, B], (1, 6, h, w)): the new [F, B]."""
    h, w = alpha.shape[-2:]
    padded = F.pad(start, (1, 1, 1, 1), mode="replicate").contiguous()
    alpha_padded = F.pad(alpha, (1, 1, 1, 1), mode="replicate")
    scratch = torch.empty((1, 6, (h + 1) // 2, (w + 1) // 2), dtype=image.dtype, device=image.device)

    def lattices(*offsets: tuple[int, int]) -> list[_SubLattice]:
        present = [(a, b) for a, b in offsets if h > a and w > b]  # a one-pixel side has one parity only
        return [_SubLattice(padded, alpha_padded, image, scratch, a=a, b=b, method=method) for a, b in present]

    red, black = lattices((0, 0), (1, 1)), lattices((0, 1), (1, 0))
    for _ in range(iterations):
        for colour in (red, black):
            for lattice in colour:
                lattice.update()
            _refresh_border(padded)
    return padded[:, :, 1:-1, 1:-1]


def estimate_foreground(
    image: Tensor, alpha: Tensor, method: MultiLevel = MultiLevel(), coarse_device: torch.device | None = None
) -> Tensor:
    """F for a picture (1, 3, H, W) and its α (1, 1, H, W), float32 in [0, 1] on one device: (1, 3, H, W).

    `coarse_device` runs the levels with both sides <= `small_size` there (the CPU beside a GPU: ten
    iterations of a few hundred pixels are all launch overhead on a GPU); the result is the same.
    """
    if image.ndim != 4 or image.shape[:2] != (1, 3) or alpha.shape != (1, 1, *image.shape[-2:]):
        raise ValueError(
            f"expected image (1, 3, H, W) and alpha (1, 1, H, W), got {tuple(image.shape)}, {tuple(alpha.shape)}"
        )
    h0, w0 = image.shape[-2:]
    foreground, background = alpha > 0.9, alpha < 0.1
    f_mean = (image * foreground).sum(dim=(2, 3), keepdim=True) / (foreground.sum() + 1e-5)
    b_mean = (image * background).sum(dim=(2, 3), keepdim=True) / (background.sum() + 1e-5)
    estimate = torch.cat([f_mean, b_mean], 1)  # (1, 6, 1, 1)
    levels = max(1, math.ceil(math.log2(max(w0, h0))))
    for level in range(levels + 1):
        w, h = round(w0 ** (level / levels)), round(h0 ** (level / levels))
        small = w <= method.small_size and h <= method.small_size
        level_image, level_alpha = _nearest(image, h, w), _nearest(alpha, h, w)
        start = _nearest(estimate, h, w)
        if small and coarse_device is not None:
            level_image, level_alpha, start = (t.to(coarse_device) for t in (level_image, level_alpha, start))
        else:
            start = start.to(image.device)
        iterations = method.small_iterations if small else method.big_iterations
        estimate = _level(level_image, level_alpha, start, iterations, method)
    return estimate[:, :3].to(image.device)
