"""Pillow's bilinear resize of 8-bit pictures, bit for bit: the torch passes (what runs on a GPU,
here on the CPU) and the function the pipeline calls (Pillow itself on the CPU) against Pillow, one
axis at a time (each of Pillow's two passes alone) and both (the width first, the order of every
Pillow release through 12: two resizes of one axis each, which are those two passes whatever Pillow
runs the test), reducing, enlarging and both at once, odd sizes and single pixels included."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest
import torch
from PIL import Image

from craftai_infer.pipelines.pillow_resize import resize_bilinear_u8, resize_by_passes

SIZES = [(1, 1), (2, 3), (17, 31), (300, 451), (640, 427), (2560, 1708)]
TARGETS = [(1024, 1024), (64, 64), (512, 512), (1, 5), (37, 1000)]


def pillow_width_then_height(picture: npt.NDArray[np.uint8], height: int, width: int) -> npt.NDArray[np.uint8]:
    image = Image.fromarray(picture)
    wide = image.resize((width, image.height), Image.Resampling.BILINEAR)
    return np.asarray(wide.resize((width, height), Image.Resampling.BILINEAR))


@pytest.mark.parametrize(("size", "target"), list(itertools.product(SIZES, TARGETS)))
def test_the_resize_is_pillows_bit_for_bit(size: tuple[int, int], target: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(size) + sum(target))
    picture = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    (h, w), (height, width) = size, target
    expected = pillow_width_then_height(picture, height, width)
    assert np.array_equal(resize_by_passes(torch.from_numpy(picture), height, width).numpy(), expected)
    assert np.array_equal(resize_bilinear_u8(torch.from_numpy(picture), height, width).numpy(), expected)
    one_axis = resize_by_passes(torch.from_numpy(picture), h, width).numpy()
    assert np.array_equal(one_axis, np.asarray(Image.fromarray(picture).resize((width, h), Image.Resampling.BILINEAR)))
    other_axis = resize_by_passes(torch.from_numpy(picture), height, w).numpy()
    assert np.array_equal(
        other_axis, np.asarray(Image.fromarray(picture).resize((w, height), Image.Resampling.BILINEAR))
    )


def test_a_photo_like_picture_too() -> None:
    """Smooth regions and edges (where rounding ties are common), not only noise."""
    yy, xx = np.mgrid[0:733, 0:1111]
    picture = np.stack([(xx * 255 // 1110), (yy * 255 // 732), ((xx + yy) % 64) * 4], axis=-1).astype(np.uint8)
    picture[200:400, 300:700] = [250, 250, 250]
    expected = pillow_width_then_height(picture, 1024, 1024)
    assert np.array_equal(resize_by_passes(torch.from_numpy(picture), 1024, 1024).numpy(), expected)
    assert np.array_equal(resize_bilinear_u8(torch.from_numpy(picture), 1024, 1024).numpy(), expected)


def test_other_pictures_are_refused() -> None:
    with pytest.raises(ValueError, match="uint8"):
        resize_bilinear_u8(torch.zeros(4, 4, 3), 2, 2)
    with pytest.raises(ValueError, match="cannot resize"):
        resize_by_passes(torch.zeros(4, 4, 3, dtype=torch.uint8), 0, 2)
