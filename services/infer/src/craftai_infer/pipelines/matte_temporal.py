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
The step is two: `still` (a frame against the one before: any frames at once) and `averaged` (in
the frames' order, cheap). Pure numpy, no state of its own: the caller keeps `Previous` for its stream.
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
    is at most STILL_LEVELS (colour channels only: a frame's own alpha is not motion). The mean is
    compared as integers (sum <= STILL_LEVELS x the pixels counted), the same test exactly."""
    a, b = picture[:, :, :3], before[:, :, :3]
    delta = np.maximum(a, b) - np.minimum(a, b)  # uint8, no overflow
    change = np.maximum(np.maximum(delta[:, :, 0], delta[:, :, 1]), delta[:, :, 2])
    total = _box_sum(change, WINDOW)
    height, width = change.shape
    counted = np.outer(_counted(height, WINDOW), _counted(width, WINDOW))
    return total <= STILL_LEVELS * counted


def averaged(
    previous: F32 | None, where_still: npt.NDArray[np.bool_] | None, matte: U8, weight: float
) -> tuple[U8, F32]:
    """This frame's matte steadied by the previous frames' average where the picture is still
    (`where_still`, from `still`), and the average the next frame takes; no previous: taken as it is."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"weight {weight}: the previous matte's share, in [0, 1)")
    current = matte.astype(np.float32)
    if previous is None or where_still is None or previous.shape != current.shape or weight == 0.0:
        kept = current
    else:
        kept = np.where(where_still, weight * previous + (1.0 - weight) * current, current).astype(np.float32)
    return np.clip(np.rint(kept), 0, 255).astype(np.uint8), kept


def stabilized(previous: Previous | None, picture: U8, matte: U8, weight: float) -> tuple[U8, Previous]:
    """This frame's matte steadied by the previous frames' (see the module), and what the next
    frame is compared with. The first frame, or one of another size, is taken as it is."""
    same = previous is not None and previous.picture.shape[:2] == picture.shape[:2]
    where = still(picture, previous.picture) if same and previous is not None and weight > 0.0 else None
    out, kept = averaged(previous.matte if same and previous is not None else None, where, matte, weight)
    return out, Previous(picture, kept)


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


def _counted(length: int, side: int) -> npt.NDArray[np.int32]:
    """How many of a side-wide window's positions around each index fall inside [0, length)."""
    pad = side // 2
    index = np.arange(length)
    return (np.minimum(index + pad, length - 1) - np.maximum(index - pad, 0) + 1).astype(np.int32)


def _box_sum(values: U8, side: int) -> npt.NDArray[np.int32]:
    """The sum over the side x side square around each pixel (zeros past the edges), in int32, one
    axis after the other."""
    pad = side // 2
    padded = np.pad(values.astype(np.int32), pad)
    height, width = values.shape
    rows = padded[0:height]
    for k in range(1, side):
        rows = rows + padded[k : k + height]
    total = rows[:, 0:width]
    for k in range(1, side):
        total = total + rows[:, k : k + width]
    return total
