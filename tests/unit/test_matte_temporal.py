"""pipelines/matte_temporal.py: the matte averaged where the picture is still, taken as it is where
it moved, the first frame untouched, and the flicker measure it lowers."""

from __future__ import annotations

import numpy as np
import pytest

from craftai_infer.pipelines import matte_temporal
from craftai_infer.pipelines.matte_temporal import STILL_LEVELS, stabilized, still

RNG = np.random.default_rng(7)


def _frames(count: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A still background with a codec's noise (a few levels) and a bright square moving right; the
    'network's' mattes: the square's 255, and noise of +-20 levels over a mid-grey background."""
    height, width = 48, 64
    base = RNG.integers(40, 200, size=(height, width, 3)).astype(np.int16)
    pictures, mattes = [], []
    for index in range(count):
        picture = np.clip(base + RNG.integers(-2, 3, size=base.shape), 0, 255).astype(np.uint8)
        left = 4 + 6 * index
        picture[10:30, left : left + 16] = 250
        matte = np.clip(100 + RNG.integers(-20, 21, size=(height, width)), 0, 255).astype(np.uint8)
        matte[10:30, left : left + 16] = 255
        pictures.append(picture)
        mattes.append(matte)
    return pictures, mattes


def test_still_pixels_are_averaged_and_moving_ones_taken_as_they_are() -> None:
    pictures, mattes = _frames(6)
    previous = None
    steadied = []
    for picture, matte in zip(pictures, mattes, strict=True):
        out, previous = stabilized(previous, picture, matte, 0.8)
        steadied.append(out)
    assert np.array_equal(steadied[0], mattes[0])  # the first frame has nothing to be steadied by
    for index in range(1, len(pictures)):
        where = still(pictures[index], pictures[index - 1])
        assert where.mean() > 0.5 and not where.all()  # most of the picture is still, the square is not
        assert np.array_equal(steadied[index][~where], mattes[index][~where])  # moving: the new matte
    before = matte_temporal.flicker(mattes, pictures)
    after = matte_temporal.flicker(steadied, pictures)
    assert before > 8 and after < before * 0.5, (before, after)


def test_a_change_above_the_threshold_is_motion_and_weight_zero_is_off() -> None:
    picture = np.full((20, 20, 3), 100, dtype=np.uint8)
    moved = picture.copy()
    moved[:, :10] += int(STILL_LEVELS) + 4  # the left half changed by more than the threshold
    assert still(moved, picture)[:, 15:].all() and not still(moved, picture)[:, :7].any()
    first, state = stabilized(None, picture, np.full((20, 20), 200, np.uint8), 0.9)
    second, _ = stabilized(state, moved, np.full((20, 20), 0, np.uint8), 0.9)
    assert (second[:, 15:] == 180).all() and (second[:, :7] == 0).all()  # 0.9 * 200 + 0.1 * 0; taken as is
    off, _ = stabilized(state, moved, np.full((20, 20), 0, np.uint8), 0.0)
    assert (off == 0).all()
    other_size, _ = stabilized(state, np.zeros((10, 10, 3), np.uint8), np.full((10, 10), 7, np.uint8), 0.9)
    assert (other_size == 7).all()
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        stabilized(None, picture, first, 1.0)
