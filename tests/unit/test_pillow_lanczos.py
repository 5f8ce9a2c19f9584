"""Pillow's 8-bit Lanczos resize restated on torch (craftai_infer.pipelines.pillow_resize), against
the installed Pillow: RGB and L pictures, reducing and enlarging each axis, odd sizes and single
pixels, on CPU tensors; Pillow 13's pass order on a grid of shapes (and that the other order, or
rounding negative weights half up, gives another answer: what the equalities prove)."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import PIL
import pytest
import torch
from PIL import Image

from craftai_infer.pipelines.pillow_resize import (
    PRECISION_BITS,
    installed_pillow_may_run_height_first,
    lanczos_coefficients,
    lanczos_vertical_first,
    resample_pass,
    resize_lanczos_by_passes,
    resize_lanczos_u8,
)

LANCZOS = Image.Resampling.LANCZOS
SIZES = [(1, 1), (1, 7), (2, 3), (17, 31), (300, 451), (451, 300)]
TARGETS = [(1, 1), (5, 1), (3, 2), (32, 32), (97, 61), (320, 320)]


def pillow(picture: npt.NDArray[np.uint8], height: int, width: int) -> npt.NDArray[np.uint8]:
    return np.asarray(Image.fromarray(picture).resize((width, height), LANCZOS))


@pytest.mark.parametrize(("size", "target"), list(itertools.product(SIZES, TARGETS)))
def test_rgb_and_l_pictures_are_pillows_bit_for_bit(size: tuple[int, int], target: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(size) * 1000 + sum(target))
    rgb = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, size, dtype=np.uint8)
    height, width = target
    assert np.array_equal(resize_lanczos_by_passes(torch.from_numpy(rgb), height, width).numpy(), pillow(rgb, *target))
    assert np.array_equal(
        resize_lanczos_by_passes(torch.from_numpy(grey), height, width).numpy(), pillow(grey, *target)
    )
    single = resize_lanczos_by_passes(torch.from_numpy(grey[:, :, None]), height, width)
    assert single.shape == (height, width, 1) and np.array_equal(single[:, :, 0].numpy(), pillow(grey, *target))
    assert np.array_equal(resize_lanczos_u8(torch.from_numpy(rgb), height, width).numpy(), pillow(rgb, *target))


@pytest.mark.parametrize(
    ("size", "target"),
    [
        ((1080, 1920), (320, 320)),  # a video frame to u2netp's square: the width first
        ((320, 320), (1080, 1920)),  # the matte back: both grow, the width first
        ((320, 320), (300, 451)),  # the matte back to a small landscape picture: the height first
        ((1000, 1400), (640, 640)),  # a landscape photo to a square: the height first by the rule
    ],
)
def test_the_sizes_of_rembgs_steps(size: tuple[int, int], target: tuple[int, int]) -> None:
    """Smooth gradients and edges (ties in the rounding), not only noise."""
    yy, xx = np.mgrid[0 : size[0], 0 : size[1]]
    picture = np.stack([xx * 255 // max(size[1] - 1, 1), yy * 255 // max(size[0] - 1, 1), (xx + yy) % 64 * 4], -1)
    picture = picture.astype(np.uint8)
    picture[size[0] // 4 : size[0] // 2, size[1] // 3 : size[1] // 2] = 250
    assert np.array_equal(
        resize_lanczos_by_passes(torch.from_numpy(picture), *target).numpy(), pillow(picture, *target)
    )


def test_pillows_pass_order_is_the_rule_on_a_grid_of_shapes() -> None:
    """Where the two orders answer differently, Pillow's answer is the order the rule names: every
    pair of shapes from the grid, each axis reduced or enlarged (up, down, both, 1-pixel sides,
    ratios exact and not). Both orders are Pillow's own one-axis resizes."""
    sides = [1, 2, 5, 13, 40, 97]
    rng = np.random.default_rng(7)
    told = {True: 0, False: 0}
    for height, width, out_height, out_width in itertools.product(sides, repeat=4):
        if height == out_height or width == out_width:
            continue  # one pass only
        grey = rng.integers(0, 256, (height, width), dtype=np.uint8)
        image = Image.fromarray(grey)
        answer = np.asarray(image.resize((out_width, out_height), LANCZOS))
        width_first = np.asarray(image.resize((out_width, height), LANCZOS).resize((out_width, out_height), LANCZOS))
        height_first = np.asarray(image.resize((width, out_height), LANCZOS).resize((out_width, out_height), LANCZOS))
        if np.array_equal(width_first, height_first):
            continue
        vertical = lanczos_vertical_first(height, width, out_height, out_width)
        assert np.array_equal(answer, height_first if vertical else width_first), (height, width, out_height, out_width)
        told[vertical] += 1
    assert told[True] > 100 and told[False] > 100


def test_the_rule_on_the_sizes_that_matter() -> None:
    assert not lanczos_vertical_first(1080, 1920, 320, 320)  # the width loses more
    assert lanczos_vertical_first(1920, 1080, 320, 320)  # a portrait frame: the height loses 1600 > 2·760
    assert not lanczos_vertical_first(3000, 4000, 1024, 1024)
    assert lanczos_vertical_first(300, 451, 320, 320) is False  # the height grows
    assert lanczos_vertical_first(320, 320, 300, 451)  # the width grows, the height shrinks
    assert not lanczos_vertical_first(320, 320, 1080, 1920)  # both grow
    assert not lanczos_vertical_first(100, 60, 80, 50)  # 20 is not more than 2·10
    assert lanczos_vertical_first(100, 60, 79, 50)


def test_the_installed_pillows_order_is_asked_of_it_on_a_picture_the_orders_tell_apart() -> None:
    """The question the passes ask the installed Pillow (a release through 12 runs the width first
    everywhere: the GPU machine's image has one) can tell the two orders apart, and this Pillow (the
    pinned 13) answers that it runs the height first where the rule says."""
    picture = np.random.default_rng(0).integers(0, 256, (24, 16), dtype=np.uint8)
    tensor = torch.from_numpy(picture)
    height_first = resize_lanczos_by_passes(tensor, 6, 12, vertical_first=True).numpy()
    width_first = resize_lanczos_by_passes(tensor, 6, 12, vertical_first=False).numpy()
    assert not np.array_equal(height_first, width_first)
    assert lanczos_vertical_first(24, 16, 6, 12)
    assert installed_pillow_may_run_height_first() is (int(PIL.__version__.split(".")[0]) >= 13)


def test_the_other_order_and_the_other_rounding_answer_otherwise() -> None:
    """What makes the equalities above prove something: on these pictures the order Pillow does not
    run, and negative weights rounded by the positive weights' rule ((int)(w·2²² + ½), C's
    truncation toward zero), both give another answer."""
    rng = np.random.default_rng(3)
    picture = rng.integers(0, 256, (451, 300, 3), dtype=np.uint8)
    expected = pillow(picture, 320, 320)  # the height first (the width grows)
    tensor = torch.from_numpy(picture)
    assert np.array_equal(resize_lanczos_by_passes(tensor, 320, 320).numpy(), expected)
    assert not np.array_equal(resize_lanczos_by_passes(tensor, 320, 320, vertical_first=False).numpy(), expected)
    wide = rng.integers(0, 256, (300, 451, 3), dtype=np.uint8)
    expected = pillow(wide, 320, 320)
    assert not np.array_equal(
        resize_lanczos_by_passes(torch.from_numpy(wide), 320, 320, vertical_first=True).numpy(), expected
    )

    def half_up(size: int, out: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        first, weights = lanczos_coefficients(size, out)
        return first, np.trunc(0.5 + weights * float(1 << PRECISION_BITS)).astype(np.int64)

    grey = rng.integers(0, 256, (2000, 97, 1), dtype=np.uint8)  # one pass, many sums (a changed one is rare)
    expected = pillow(grey[:, :, 0], 2000, 41)
    first, fixed = half_up(97, 41)
    assert np.array_equal(resize_lanczos_by_passes(torch.from_numpy(grey), 2000, 41)[:, :, 0].numpy(), expected)
    assert not np.array_equal(resample_pass(torch.from_numpy(grey), 1, first, fixed)[:, :, 0].numpy(), expected)


def test_same_size_and_refusals() -> None:
    picture = torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8)
    same = resize_lanczos_by_passes(picture, 5, 7)
    assert torch.equal(same, picture) and same.data_ptr() != picture.data_ptr()
    with pytest.raises(ValueError, match="premultiplied"):
        resize_lanczos_by_passes(torch.zeros(4, 4, 4, dtype=torch.uint8), 2, 2)
    with pytest.raises(ValueError, match="uint8"):
        resize_lanczos_u8(torch.zeros(4, 4, 3), 2, 2)
    with pytest.raises(ValueError, match="cannot resize"):
        resize_lanczos_by_passes(torch.zeros(4, 4, 3, dtype=torch.uint8), 0, 2)
