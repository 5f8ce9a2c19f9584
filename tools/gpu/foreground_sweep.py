"""The red–black sweep: the foreground estimation GPU routes ran until 2026-12-05, kept as the
baseline of tools/gpu/foreground_order.py's figure (docs/MATTE.md). The multi-level method of
craftai_infer/pipelines/foreground.py (its equations, levels, iteration counts and borders,
pymatting's), with the pixels updated in red–black order rather than pymatting's raster order: two
parallel passes an iteration, but 2.9-4.9 levels off pymatting in partial-alpha pixels at the
defaults, where the raster order (now run on a GPU as one kernel a level:
pipelines/foreground_kernel.py) is pymatting's answer.

Here the pixels with x + y even are updated together, then the others, each half seeing the other's
newest values (red–black Gauss–Seidel). The pixels of one colour split into two sub-lattices by
(y mod 2, x mod 2), each a strided view of one padded buffer holding F and B, so an update reads its
four neighbours as views (no copies) and writes only its own pixels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines.foreground import MultiLevel

__all__ = ["estimate_foreground"]
DEFAULTS = MultiLevel()


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
    image: Tensor, alpha: Tensor, method: MultiLevel = DEFAULTS, coarse_device: torch.device | None = None
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
