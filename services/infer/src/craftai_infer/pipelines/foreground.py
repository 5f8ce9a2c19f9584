"""Foreground colour estimation: the multi-level method of Germer, Uelwer, Conrad and Harmeling
("Fast Multi-Level Foreground Estimation", ICPR 2020), computed as pymatting's
`estimate_foreground_ml` computes it (the same answer up to float32 rounding), in torch (CPU or GPU).
docs/MATTE.md says why this method, why pymatting's order and what it costs.

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

The order is pymatting's: an iteration updates the pixels one after the other in raster order, each
seeing the new values of its left and upper neighbours and the old ones of its right and lower
neighbours (Gauss–Seidel). Two iterations are far from the fixed point, so the order decides the
answer. Any schedule that keeps who sees what gives the same answer, and the one with the most
parallelism is the anti-diagonal wavefront: the pixels of diagonal d (x + y = d) depend only on
diagonals d − 1 (new) and d + 1 (old), so a diagonal is updated at once, and iteration i + 1 can run
on diagonal d − 2 while iteration i runs on d: one step updates one diagonal of every iteration,
h + w + 2·iterations steps a level.

For that, a level lives skewed (`_Skew`): the cell of (y, x), d = x + y, is (d // 2) · (h + 2) + y + 1
in the array of d's parity, so the diagonals a step updates (d, d − 2, …) are one contiguous block
of one array, and their left and upper neighbours (diagonal d − 1, rows y and y − 1) and their right
and lower ones (d + 1, rows y and y + 1) four contiguous blocks of the other: nine tensor
operations on views a step, whatever the size. Diagonals are h + 2 cells (h: the shorter side;
a taller level is transposed, which changes no pixel's neighbours). The grid has a frame of mirror
cells one pixel outside the picture: each copies the border pixel next to it when its diagonal is
updated (weight ε towards it, nothing else, solved by 1/ε), so a border pixel reads its own value of
the previous iteration outside, as pymatting's clamped index does. Every other cell off the picture
weighs nothing and solves to 0. The weights d_ij are kept once per edge: a pixel's right weight is
its right neighbour's left weight, its lower weight its lower neighbour's upper one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines import foreground_kernel

__all__ = ["MultiLevel", "estimate_foreground"]


@dataclass(frozen=True)
class MultiLevel:
    """The method's constants (pymatting's defaults)."""

    regularization: float = 1e-5  # ε
    gradient_weight: float = 1.0  # ω
    small_iterations: int = 10  # iterations at the levels whose sides are both <= small_size
    big_iterations: int = 2  # iterations at every other level
    small_size: int = 32


def _unit(x: Tensor, *, copy: bool = False) -> Tensor:
    """float32 in [0, 1]: uint8 read as v / 255, float32 as it is (a copy of it with `copy`)."""
    if x.dtype == torch.uint8:
        return x.float() / 255.0
    return x.clone() if copy else x


def _nearest(x: Tensor, height: int, width: int) -> Tensor:
    """(H, W, ...) -> (height, width, ...): source index i * H // height (pymatting's nearest)."""
    h, w = x.shape[:2]
    if (h, w) == (height, width):
        return x
    rows = (torch.arange(height, device=x.device) * h // height).clamp(max=h - 1)
    cols = (torch.arange(width, device=x.device) * w // width).clamp(max=w - 1)
    return x.index_select(0, rows).index_select(1, cols)


class _Skew:
    """The skewed layout of an h × w level framed by one cell on every side (rows and columns −1 to
    h and w) for `iterations` pipelined iterations: the cell of (y, x), d = x + y, is
    (d // 2 + pad) · (h + 2) + y + 1 of array d % 2 (module doc). `pad` columns of unused cells on
    each side hold the steps where an iteration is not yet or no longer on the grid."""

    def __init__(self, h: int, w: int, iterations: int, device: torch.device) -> None:
        self.h, self.w, self.iterations, self.device = h, w, iterations, device
        self.rows = h + 2  # a column: a frame cell, h rows, a frame cell
        self.pad = iterations + 2
        self.columns = (h + w + 2 + 2 * iterations) // 2 + 2 * self.pad + 2
        # the diagonals updated run from −1 (the mirrors before pixel (0, 0)) to h + w − 1 (those after
        # pixel (h − 1, w − 1)); step t updates diagonals t − 2 − 2i, from t = 0 (the first an even one)
        self.steps = h + w + 2 + 2 * (iterations - 1)
        self.block = iterations * self.rows  # the cells a step updates

    def zeros(self, *tail: int) -> Tensor:
        """(2, cells, *tail) float32 zeros: cells that weigh nothing and solve to 0."""
        return torch.zeros((2, self.columns * self.rows, *tail), device=self.device)

    def _lattices(self, arrays: Tensor, frame: int) -> list[tuple[int, int, Tensor]]:
        """(a, b, view): the cells (y, x) of the h × w picture (`frame` 0) or of it framed by one cell
        (`frame` 1) with y + frame ≡ a and x + frame ≡ b (mod 2), as a (rows, cols, *tail) strided view
        of `arrays` (2, cells, *tail): two rows or two columns on, a cell is a fixed step further."""
        cell = arrays.stride(1)
        found = []
        for a in (0, 1):
            for b in (0, 1):
                y, x = a - frame, b - frame  # the sub-lattice's first cell
                rows, cols = (self.h + 2 * frame - a + 1) // 2, (self.w + 2 * frame - b + 1) // 2
                if rows <= 0 or cols <= 0:
                    continue
                array = arrays[(x + y) % 2]
                first = (((x + y) // 2 + self.pad) * self.rows + y + 1) * cell
                view = array.as_strided(
                    (rows, cols, *array.shape[1:]),
                    ((self.rows + 2) * cell, self.rows * cell, *array.stride()[1:]),
                    array.storage_offset() + first,
                )
                found.append((a, b, view))
        return found

    def put(self, arrays: Tensor, plane: Tensor, frame: int = 0) -> None:
        """An (h + 2·frame, w + 2·frame, *tail) plane into its cells of `arrays`."""
        for a, b, view in self._lattices(arrays, frame):
            view.copy_(plane[a::2, b::2])

    def put_enlarged(self, arrays: Tensor, coarse: Tensor) -> None:
        """A coarser (h', w', *tail) plane into the framed grid: enlarged by `_nearest` to (h, w), the
        frame repeating the border, a quarter of the grid at a time."""
        h, w = coarse.shape[:2]
        rows = (torch.arange(-1, self.h + 1, device=coarse.device).clamp(0, self.h - 1) * h // self.h).clamp(max=h - 1)
        cols = (torch.arange(-1, self.w + 1, device=coarse.device).clamp(0, self.w - 1) * w // self.w).clamp(max=w - 1)
        for a, b, view in self._lattices(arrays, 1):
            view.copy_(coarse.index_select(0, rows[a::2]).index_select(1, cols[b::2]))

    def take(self, arrays: Tensor) -> Tensor:
        """The (h, w, *tail) picture held in `arrays`."""
        plane = torch.empty((self.h, self.w, *arrays.shape[2:]), device=self.device)
        for a, b, view in self._lattices(arrays, 0):
            plane[a::2, b::2] = view
        return plane

    def blocks(self, arrays: Tensor, parity: int, shift: int) -> Tensor:
        """The blocks of `arrays`[parity] that the steps 2u + parity update, moved `shift` cells on, as
        a (steps, block, *tail) view whose index u is step 2u + parity's block (its lowest diagonal,
        2u + parity − 2 − 2(iterations − 1), is in column u − iterations + pad)."""
        array = arrays[parity]
        cell = array.stride(0)
        first = ((self.pad - self.iterations) * self.rows + shift) * cell
        count = (self.steps + 1) // 2
        return array.as_strided(
            (count, self.block, *array.shape[1:]), (self.rows * cell, *array.stride()), array.storage_offset() + first
        )


def _weights(framed: Tensor, rows: slice, cols: slice, towards: tuple[int, int], method: MultiLevel) -> Tensor:
    """d_ij between the cells (rows, cols) of the framed grid, whose α is `framed`, and their
    neighbours `towards` (dy, dx); 0 at every other cell."""
    dy, dx = towards
    d = torch.zeros_like(framed)
    other = framed[rows.start + dy : rows.stop + dy, cols.start + dx : cols.stop + dx]
    d[rows, cols] = (framed[rows, cols] - other).abs_().mul_(method.gradient_weight).add_(method.regularization)
    return d


class _Constants:
    """A level's constants in the skewed layout, each (2, cells, channels): the left and upper weights
    d_ij, the inverse [b00, b01, b11] of each cell's 2×2 matrix, and that inverse times
    [α I, (1 − α) I]. A mirror weighs ε towards its pixel (d_ij with α outside the picture its
    border's) and nothing else, and solves by the inverse of that weight; every other weight and
    constant off the picture is 0. Planes are made at the level's size (framed: (h + 2, w + 2)) and
    put at once, so that few are held beside the skewed arrays; the arithmetic is pymatting's, in
    its order."""

    def __init__(self, skew: _Skew, image: Tensor, alpha: Tensor, method: MultiLevel) -> None:
        h, w = alpha.shape
        framed = F.pad(alpha[None, None], (1, 1, 1, 1), mode="replicate")[0, 0]

        # A cell's left weight: the pixels' and the right mirrors'; its upper weight: the pixels' and
        # the lower mirrors'. A cell's right (lower) weight is its right (lower) neighbour's left (upper).
        left = _weights(framed, slice(1, h + 1), slice(1, w + 2), (0, -1), method)
        up = _weights(framed, slice(1, h + 2), slice(1, w + 1), (-1, 0), method)
        rest = 1.0 - alpha
        a00, a11, a01 = alpha * alpha, rest * rest, alpha * rest
        for d in (left[1:-1, 1:-1], left[1:-1, 2:], up[1:-1, 1:-1], up[2:, 1:-1]):  # left, right, up, down
            a00 += d
            a11 += d
        mirrors = (  # (cells of the framed grid, the weight that links them to their pixel)
            ((slice(1, h + 1), 0), left[1:-1, 1].clone()),  # left of column 0
            ((slice(1, h + 1), w + 1), left[1:-1, w + 1].clone()),  # right of column w − 1
            ((0, slice(1, w + 1)), up[1, 1:-1].clone()),  # above row 0
            ((h + 1, slice(1, w + 1)), up[h + 1, 1:-1].clone()),  # below row h − 1
        )
        self.left, self.up = skew.zeros(1), skew.zeros(1)
        skew.put(self.left, left[:, :, None], frame=1)
        skew.put(self.up, up[:, :, None], frame=1)
        del left, up, framed
        inverse = 1.0 / (a00 * a11 - a01 * a01)
        b00, b01, b11 = a11.mul_(inverse), a01.mul_(-inverse), a00.mul_(inverse)
        del inverse
        self.inverse = skew.zeros(3)
        for index, plane in enumerate((b00, b01, b11)):
            full = F.pad(plane[None, None], (1, 1, 1, 1))[0, 0]
            if index != 1:
                for cells, link in mirrors:
                    full[cells] = 1.0 / link
            skew.put(self.inverse[:, :, index], full, frame=1)
            del full
        self.constant = skew.zeros(6)
        scratch = torch.empty_like(alpha)
        for channel in range(3):
            back = _unit(image[:, :, channel], copy=True)  # the colour, then (1 − α) times it
            fore = alpha * back
            back.mul_(rest)
            torch.mul(b00, fore, out=scratch).addcmul_(b01, back)
            skew.put(self.constant[:, :, channel], scratch)
            torch.mul(b01, fore, out=scratch).addcmul_(b11, back)
            skew.put(self.constant[:, :, 3 + channel], scratch)
            del fore, back


class _Steps:
    """What the steps 2u + parity of a level read and write, as (steps, block, channels) views whose
    index u is step 2u + parity's block: its own cells in array p = parity (one diagonal of each
    iteration), their neighbours' in array q = 1 − p, and the constants of both."""

    def __init__(self, skew: _Skew, parity: int, state: Tensor, constants: _Constants) -> None:
        p, q, rows = parity, 1 - parity, skew.rows
        back = -q * rows  # diagonal d − 1 of the block's lowest diagonal: one column back in array q when p = 0
        blocks, c = skew.blocks, constants
        self.own = blocks(state, p, 0)
        self.terms = (  # (weight, neighbour) in pymatting's order
            (blocks(c.left, p, 0), blocks(state, q, back)),  # left: d − 1, row y
            (blocks(c.left, q, back + rows), blocks(state, q, back + rows)),  # right: d + 1, row y
            (blocks(c.up, p, 0), blocks(state, q, back - 1)),  # up: d − 1, row y − 1
            (blocks(c.up, q, back + rows + 1), blocks(state, q, back + rows + 1)),  # down: d + 1, row y + 1
        )
        inverse, constant = blocks(c.inverse, p, 0), blocks(c.constant, p, 0)
        self.fore = (self.own[:, :, :3], constant[:, :, :3], inverse[:, :, 0:1], inverse[:, :, 1:2])
        self.back = (self.own[:, :, 3:], constant[:, :, 3:], inverse[:, :, 2:3], inverse[:, :, 1:2])

    def run(self, u: int, s: Tensor) -> None:
        """Step 2u + parity: s = Σ_j d_ij [F_j, B_j], then F = c_F + b00 s_F + b01 s_B and
        B = c_B + b11 s_B + b01 s_F, clipped, written in place."""
        (weight, value), *others = self.terms
        torch.mul(weight[u], value[u], out=s)
        for weight, value in others:
            s.addcmul_(weight[u], value[u])
        s_fore, s_back = s[:, :3], s[:, 3:]
        for (out, constant, diagonal, cross), mine, other in ((self.fore, s_fore, s_back), (self.back, s_back, s_fore)):
            torch.addcmul(constant[u], diagonal[u], mine, out=out[u]).addcmul_(cross[u], other)
        self.own[u].clamp_(0.0, 1.0)


def _level(image: Tensor, alpha: Tensor, skew: _Skew, state: Tensor, method: MultiLevel) -> None:
    """The level's sweeps on `state` (2, cells, 6), which holds its start: image (h, w, 3), float32 or
    uint8, and alpha (h, w), float32, in the layout's orientation."""
    constants = _Constants(skew, image, alpha, method)
    if foreground_kernel.runs_on(state.device):  # every step in one launch (its module says why)
        c = constants
        if foreground_kernel.run_level(
            state, c.left, c.up, c.inverse, c.constant,
            rows=skew.rows, first=(skew.pad - skew.iterations) * skew.rows, steps=skew.steps, block=skew.block,
        ):  # fmt: skip
            return
    steps = (_Steps(skew, 0, state, constants), _Steps(skew, 1, state, constants))
    del constants  # held by the views, and freed with them
    s = torch.empty((skew.block, 6), device=state.device)  # Σ_j d_ij [F_j, B_j] of a step's cells
    for step in range(skew.steps):
        steps[step % 2].run(step // 2, s)


def estimate_foreground(
    image: Tensor, alpha: Tensor, method: MultiLevel = MultiLevel(), coarse_device: torch.device | None = None
) -> Tensor:
    """F for a picture (1, 3, H, W) and its α (1, 1, H, W) on one device, each float32 in [0, 1] or
    uint8 (read as v / 255, never held as floats at the picture's size): (1, 3, H, W) float32.

    `coarse_device` runs the levels with both sides <= `small_size` there (the CPU beside a GPU: ten
    iterations of a few hundred pixels are all launch overhead on a GPU); the result is the same.
    """
    if image.ndim != 4 or image.shape[:2] != (1, 3) or alpha.shape != (1, 1, *image.shape[-2:]):
        raise ValueError(
            f"expected image (1, 3, H, W) and alpha (1, 1, H, W), got {tuple(image.shape)}, {tuple(alpha.shape)}"
        )
    picture, matte = image[0].permute(1, 2, 0), alpha[0, 0]  # (H, W, 3), (H, W): views
    h0, w0 = matte.shape
    means = []
    for chosen in (_unit(matte) > 0.9, _unit(matte) < 0.1):
        total = torch.stack([(_unit(picture[:, :, c]) * chosen).sum() for c in range(3)])
        means.append(total / (chosen.sum() + 1e-5))
    estimate = torch.cat(means).view(1, 1, 6)  # [F, B] of the 1 × 1 level 0
    levels = max(1, math.ceil(math.log2(max(w0, h0))))
    for level in range(levels + 1):
        w, h = round(w0 ** (level / levels)), round(h0 ** (level / levels))
        small = w <= method.small_size and h <= method.small_size
        device = coarse_device if small and coarse_device is not None else image.device
        level_image = _nearest(picture, h, w).to(device)
        level_alpha = _unit(_nearest(matte, h, w).to(device))
        coarse = estimate.to(device)
        if h > w:  # diagonals as long as the shorter side: fewer cells (the answer is the same)
            level_image, level_alpha, coarse = level_image.transpose(0, 1), level_alpha.t(), coarse.transpose(0, 1)
        iterations = method.small_iterations if small else method.big_iterations
        skew = _Skew(level_alpha.shape[0], level_alpha.shape[1], max(iterations, 1), device)
        state = skew.zeros(6)
        skew.put_enlarged(state, coarse)
        del estimate, coarse  # the coarser level's, enlarged into this one's
        if iterations > 0:
            _level(level_image, level_alpha, skew, state, method)
        del level_image, level_alpha
        estimate = skew.take(state[:, :, : 3 if level == levels else 6])
        del state
        if h > w:
            estimate = estimate.transpose(0, 1)
    return estimate.permute(2, 0, 1)[None].to(image.device)
