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


def test_still_is_the_mean_over_the_window_cut_at_the_edges() -> None:
    """The integer test (window sum against STILL_LEVELS x the pixels counted) is the mean's, pixel
    by pixel, on pictures with changes around the threshold, at the edges and corners too."""
    pad = matte_temporal.WINDOW // 2
    rng = np.random.default_rng(11)
    for shape in ((9, 13), (4, 7), (16, 16)):
        before = rng.integers(0, 256, size=(*shape, 3)).astype(np.uint8)
        spread = np.linspace(2, 16, shape[1])[None, :, None]  # still on the left, moving on the right
        noise = np.rint((rng.random(before.shape) * 2 - 1) * spread).astype(np.int16)
        picture = np.clip(before.astype(np.int16) + noise, 0, 255).astype(np.uint8)
        change = np.abs(picture.astype(np.int16) - before).max(axis=2)
        expected = np.zeros(shape, bool)
        for y in range(shape[0]):
            for x in range(shape[1]):
                window = change[max(0, y - pad) : y + pad + 1, max(0, x - pad) : x + pad + 1]
                expected[y, x] = window.mean() <= STILL_LEVELS
        assert expected.any() and not expected.all(), shape  # both sides of the threshold are tried
        assert np.array_equal(still(picture, before), expected), shape


def test_averaged_in_order_is_stabilized() -> None:
    """The two steps the service runs apart (`still` for any frames at once, `averaged` in order)
    give what `stabilized` gives."""
    pictures, mattes = _frames(4)
    previous, kept = None, None
    for index, (picture, matte) in enumerate(zip(pictures, mattes, strict=True)):
        whole, previous = stabilized(previous, picture, matte, 0.7)
        where = still(picture, pictures[index - 1]) if index else None
        out, kept = matte_temporal.averaged(kept, where, matte, 0.7)
        assert np.array_equal(out, whole) and np.array_equal(kept, previous.matte)
