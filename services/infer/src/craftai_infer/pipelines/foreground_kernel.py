"""A level of the foreground estimation (pipelines/foreground.py) on a GPU: all of its wavefront steps
in one Triton kernel launch, instead of nine tensor operations a step from the host.

Why: the wavefront keeps pymatting's raster order (its answer within a level), but a level is
h + w + 2·iterations steps in sequence, and each step's work is small (at most iterations · (h + 2)
cells); launched from the host, a 4000x3000 picture is ~14,000 steps of nine kernels, all launch
overhead. Here one launch runs every step of a level: `programs` thread blocks split each step's cells
between them and wait for each other between steps (a barrier on a counter in device memory), so
the device never waits for the host.

The arithmetic is `foreground._Steps.run`'s, cell for cell, on the same skewed arrays (their
geometry: `foreground._Skew`): for step t = 2u + p, the cells of array p from `first + u · rows` on
(`block` of them) are updated from their four neighbours in array q = 1 − p (at −q·rows, +rows,
−1 and +rows + 1 from there), which the step does not write. Between steps every block's writes
must be seen by every other block: each block finishes its stores (a block barrier), adds one to
the counter with release semantics, and waits with acquiring reads until all blocks have done the
step; the neighbours' values are read through the L2 cache only (".cg": never an SM's stale L1
line). The blocks must all be resident at once (the wait would never end otherwise): `programs`
stays far under the number of multiprocessors.

Triton's interpreter (TRITON_INTERPRET=1) runs the same kernel on the CPU, one block: the unit
tests compare it with the host-launched steps there; tests/gpu/test_matte_outputs_gpu.py checks the
compiled kernel against pymatting and against one block.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import torch
from torch import Tensor

__all__ = ["PROGRAMS", "available", "broken", "run_level", "runs_on"]

log = logging.getLogger(__name__)

PROGRAMS = 8  # thread blocks a level's steps are split between (docs/MATTE.md: measured)
BLOCK = 1024  # cells one block updates at a time


@functools.cache
def available() -> bool:
    """Triton is importable (CUDA builds of torch ship it; the CPU build does not)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _interpreted() -> bool:
    """Triton's own switch: its interpreter runs kernels on CPU tensors (one block at a time)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


_broken: list[str] = []  # why the kernel could not be built here, once it could not


def broken() -> str | None:
    """Why this process runs the host-launched steps on a GPU instead (the kernel did not compile)."""
    return _broken[0] if _broken else None


def runs_on(device: torch.device) -> bool:
    """A level on `device` runs as this kernel: on CUDA where Triton is there and the kernel builds
    (on the CPU under Triton's interpreter, for the tests)."""
    return available() and not _broken and device.type == ("cpu" if _interpreted() else "cuda")


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def level_steps(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - its buffers and geometry (Triton reads no annotations but constexpr)
        state,
        left,
        up,
        inverse,
        constant,
        counter,
        cells,
        rows,
        first,
        steps,
        block,
        PROGRAMS: tl.constexpr,  # noqa: N803 - Triton's convention for compile-time constants
        BLOCK: tl.constexpr,  # noqa: N803
    ) -> None:
        me = tl.program_id(0)
        lanes = tl.arange(0, BLOCK)
        share = tl.cdiv(tl.cdiv(block, PROGRAMS), BLOCK) * BLOCK  # this block's cells: [me·share, (me+1)·share)
        for t in range(steps):
            p = t % 2
            q = 1 - p
            u = t // 2
            mine = p * cells + first + u * rows  # the step's first cell, over both arrays
            theirs = q * cells + first + u * rows - q * rows  # its left neighbour's
            for start in range(me * share, me * share + share, BLOCK):
                k = start + lanes
                live = k < block
                own = mine + k
                to_left = theirs + k
                to_right = theirs + rows + k
                to_up = theirs - 1 + k
                to_down = theirs + rows + 1 + k
                w_left = tl.load(left + own, mask=live, other=0.0)
                w_right = tl.load(left + to_right, mask=live, other=0.0)
                w_up = tl.load(up + own, mask=live, other=0.0)
                w_down = tl.load(up + to_down, mask=live, other=0.0)
                b00 = tl.load(inverse + own * 3, mask=live, other=0.0)
                b01 = tl.load(inverse + own * 3 + 1, mask=live, other=0.0)
                b11 = tl.load(inverse + own * 3 + 2, mask=live, other=0.0)
                for c in tl.static_range(3):  # F's channel c and B's (channel 3 + c)
                    s_fore = w_left * tl.load(state + to_left * 6 + c, mask=live, other=0.0, cache_modifier=".cg")
                    s_fore += w_right * tl.load(state + to_right * 6 + c, mask=live, other=0.0, cache_modifier=".cg")
                    s_fore += w_up * tl.load(state + to_up * 6 + c, mask=live, other=0.0, cache_modifier=".cg")
                    s_fore += w_down * tl.load(state + to_down * 6 + c, mask=live, other=0.0, cache_modifier=".cg")
                    b = 3 + c
                    s_back = w_left * tl.load(state + to_left * 6 + b, mask=live, other=0.0, cache_modifier=".cg")
                    s_back += w_right * tl.load(state + to_right * 6 + b, mask=live, other=0.0, cache_modifier=".cg")
                    s_back += w_up * tl.load(state + to_up * 6 + b, mask=live, other=0.0, cache_modifier=".cg")
                    s_back += w_down * tl.load(state + to_down * 6 + b, mask=live, other=0.0, cache_modifier=".cg")
                    fore = tl.load(constant + own * 6 + c, mask=live, other=0.0) + b00 * s_fore + b01 * s_back
                    back = tl.load(constant + own * 6 + b, mask=live, other=0.0) + b11 * s_back + b01 * s_fore
                    tl.store(state + own * 6 + c, tl.minimum(tl.maximum(fore, 0.0), 1.0), mask=live)
                    tl.store(state + own * 6 + b, tl.minimum(tl.maximum(back, 0.0), 1.0), mask=live)
            tl.debug_barrier()  # this block's stores are done
            if PROGRAMS > 1:
                tl.atomic_add(counter, 1, sem="release", scope="gpu")
                target = (t + 1) * PROGRAMS
                while tl.atomic_add(counter, 0, sem="acquire", scope="gpu") < target:
                    pass
                tl.debug_barrier()

    return level_steps


def run_level(
    state: Tensor,
    left: Tensor,
    up: Tensor,
    inverse: Tensor,
    constant: Tensor,
    *,
    rows: int,
    first: int,
    steps: int,
    block: int,
    programs: int | None = None,
) -> bool:
    """Every step of a level on `state` (2, cells, 6), in place; the constants are (2, cells, k)
    contiguous float32 on the same device (foreground._Constants). `first`: the cell where step 0's
    block starts; a step moves `rows` cells on every second step. `programs`: PROGRAMS unless given.
    False, with `state` untouched, when the kernel cannot be built here (`broken` says why)."""
    for tensor, width in ((state, 6), (left, 1), (up, 1), (inverse, 3), (constant, 6)):
        if not tensor.is_contiguous() or tensor.dtype != torch.float32 or tensor.shape[-1] != width:
            raise ValueError(f"expected contiguous float32 (2, cells, {width}), got {tuple(tensor.shape)}")
    programs = programs or PROGRAMS
    if _interpreted():
        programs = 1  # the interpreter runs the blocks one after the other: one would wait for ever
    else:  # all resident at once: one a multiprocessor at most (several fit on one)
        programs = min(programs, torch.cuda.get_device_properties(state.device).multi_processor_count)
    counter = torch.zeros(1, dtype=torch.int32, device=state.device)
    try:
        kernel = _kernel()
        kernel.warmup(  # compiled here (or loaded from Triton's cache) before anything runs
            state, left, up, inverse, constant, counter, state.shape[1], rows, first, steps, block,
            PROGRAMS=programs, BLOCK=BLOCK, grid=(programs,),
        )  # fmt: skip
    except Exception as exc:  # any failure to build it: the same answer, launched from the host
        _broken.append(f"{type(exc).__name__}: {exc}")
        log.warning("the foreground kernel did not build (%s): a GPU's cutouts take the slower steps", _broken[0])
        return False
    kernel[(programs,)](
        state, left, up, inverse, constant, counter, state.shape[1], rows, first, steps, block,
        PROGRAMS=programs, BLOCK=BLOCK,
    )  # fmt: skip
    return True
