"""A video's matte kept steady where the picture is: an exponential average of the mattes, gated by
the frames' difference.

A network sees each frame alone, so where nothing moved its matte still changes a little from
frame to frame (the codec's noise, the subject moving elsewhere in its receptive field): on a still
background that is flicker. Where a pixel's neighbourhood did not change since the previous frame
(its mean change over a WINDOW x WINDOW square at most STILL_LEVELS of 255, on the channel that
changed most), the matte keeps `weight` of its previous value:

    a'_t = weight * a'_(t-1) + (1 - weight) * a_t     where still
    a'_t = a_t                                         elsewhere (a moving subject is never dragged)

The average is kept in float between frames (no rounding drift); each frame's matte is it rounded.
Pure numpy, no state of its own: the caller keeps `Previous` for its stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
STILL_LEVELS = 6.0  # a still pixel's mean change around it, of 255 (a codec's noise is a few levels)
WINDOW = 5  # the square over which a pixel's change is averaged (single noisy pixels are not motion)


@dataclass(frozen=True)
class Previous:
    """What the next frame is compared with: the previous frame's picture and its averaged matte."""

    picture: U8
    matte: F32


def still(picture: U8, before: U8) -> npt.NDArray[np.bool_]:
    """Where the picture did not change: the mean over WINDOW x WINDOW of the largest channel change
    is at most STILL_LEVELS (colour channels only: a frame's own alpha is not motion)."""
    change = np.abs(picture[:, :, :3].astype(np.int16) - before[:, :, :3]).max(axis=2).astype(np.float32)
    return _box_mean(change, WINDOW) <= STILL_LEVELS


def stabilized(previous: Previous | None, picture: U8, matte: U8, weight: float) -> tuple[U8, Previous]:
    """This frame's matte steadied by the previous frames' (see the module), and what the next
    frame is compared with. The first frame, or one of another size, is taken as it is."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"weight {weight}: the previous matte's share, in [0, 1)")
    current = matte.astype(np.float32)
    if previous is None or previous.picture.shape[:2] != picture.shape[:2] or weight == 0.0:
        averaged = current
    else:
        averaged = np.where(
            still(picture, previous.picture), weight * previous.matte + (1.0 - weight) * current, current
        ).astype(np.float32)
    out = np.clip(np.rint(averaged), 0, 255).astype(np.uint8)
    return out, Previous(picture, averaged)


def flicker(mattes: list[U8], pictures: list[U8]) -> float:
    """The mean frame-to-frame change of the matte (of 255) over the pixels that stayed still: what
    stabilizing removes."""
    changes = []
    for index in range(1, len(mattes)):
        where = still(pictures[index], pictures[index - 1])
        if where.any():
            delta = np.abs(mattes[index].astype(np.int16) - mattes[index - 1])[where]
            changes.append(float(delta.mean()))
    return float(np.mean(changes)) if changes else 0.0


def _box_mean(values: F32, side: int) -> F32:
    """The mean over a side x side square around each pixel (the square cut at the edges)."""
    pad = side // 2
    padded = np.pad(values, pad, mode="constant")
    counts = np.pad(np.ones_like(values), pad, mode="constant")
    total = _box_sum(padded, side)
    n = _box_sum(counts, side)
    return (total / n).astype(np.float32)


def _box_sum(values: F32, side: int) -> F32:
    """Sums over every side x side window (the output side - 1 smaller on each axis)."""
    summed = np.cumsum(np.cumsum(values, axis=0, dtype=np.float64), axis=1)
    summed = np.pad(summed, ((1, 0), (1, 0)))
    return (summed[side:, side:] - summed[:-side, side:] - summed[side:, :-side] + summed[:-side, :-side]).astype(
        np.float32
    )
