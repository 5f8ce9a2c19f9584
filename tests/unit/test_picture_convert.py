"""Pillow pictures of every common mode -> RGB uint8, EXIF orientation honoured."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from craftai_infer.pipelines.picture_convert import to_rgb_uint8


def test_rgb_is_unchanged() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    out = to_rgb_uint8(Image.fromarray(rgb))
    assert out.dtype == np.uint8 and np.array_equal(out, rgb)


@pytest.mark.parametrize("mode", ["L", "1"])
def test_greys_become_three_equal_channels(mode: str) -> None:
    grey = Image.fromarray(np.array([[0, 128, 255]], np.uint8)).convert(mode, dither=Image.Dither.NONE)
    out = to_rgb_uint8(grey)
    expected = [0, 128, 255] if mode == "L" else [0, 255, 255]
    assert out.shape == (1, 3, 3) and out[0, :, 0].tolist() == expected
    assert np.array_equal(out[..., 0], out[..., 2])


def test_16_bit_grey_is_scaled_not_clipped() -> None:
    values = np.array([[0, 257, 32896, 65535]], np.uint16)
    for picture in (Image.fromarray(values), Image.fromarray(values.astype(np.int32))):
        assert picture.mode in ("I;16", "I")
        assert to_rgb_uint8(picture)[0, :, 0].tolist() == [0, 1, 128, 255]


def test_16_bit_png_round_trip() -> None:
    buffer = io.BytesIO()
    Image.fromarray(np.array([[0, 65535]], np.uint16)).save(buffer, "PNG")
    assert to_rgb_uint8(Image.open(io.BytesIO(buffer.getvalue())))[0, :, 0].tolist() == [0, 255]


def test_transparency_is_composited_over_white() -> None:
    rgba = np.array([[[255, 0, 0, 255], [255, 0, 0, 0], [0, 0, 0, 128]]], np.uint8)
    out = to_rgb_uint8(Image.fromarray(rgba))
    # 128/255 of black over white: 255 · 127/255 = 127
    assert out[0].tolist() == [[255, 0, 0], [255, 255, 255], [127, 127, 127]]
    la = Image.fromarray(np.array([[[0, 0], [0, 255]]], np.uint8)).convert("LA")
    assert to_rgb_uint8(la)[0].tolist() == [[255, 255, 255], [0, 0, 0]]


def test_palette_with_and_without_transparency() -> None:
    palette = Image.new("P", (2, 1))
    palette.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    palette.putpixel((0, 0), 0)
    palette.putpixel((1, 0), 1)
    assert to_rgb_uint8(palette)[0].tolist() == [[10, 20, 30], [200, 100, 50]]
    palette.info["transparency"] = 0
    assert to_rgb_uint8(palette)[0].tolist() == [[255, 255, 255], [200, 100, 50]]


def test_cmyk() -> None:
    cmyk = Image.new("CMYK", (2, 1))
    cmyk.putpixel((0, 0), (0, 0, 0, 0))  # paper white
    cmyk.putpixel((1, 0), (0, 255, 255, 0))  # red
    assert to_rgb_uint8(cmyk)[0].tolist() == [[255, 255, 255], [255, 0, 0]]


def test_float_pictures() -> None:
    assert to_rgb_uint8(Image.fromarray(np.array([[0.0, 0.5, 1.0]], np.float32)))[0, :, 0].tolist() == [0, 128, 255]
    assert to_rgb_uint8(Image.fromarray(np.array([[0.0, 300.0]], np.float32)))[0, :, 0].tolist() == [0, 255]


@pytest.mark.parametrize(("orientation", "shape"), [(1, (2, 3)), (3, (2, 3)), (6, (3, 2)), (8, (3, 2))])
def test_exif_orientation(orientation: int, shape: tuple[int, int]) -> None:
    stored = np.zeros((2, 3, 3), np.uint8)
    stored[0, 0] = [255, 0, 0]  # top-left marker as stored
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(stored).save(buffer, "PNG", exif=exif.tobytes())
    out = to_rgb_uint8(Image.open(io.BytesIO(buffer.getvalue())))
    assert out.shape[:2] == shape
    # where the stored top-left pixel is seen: 3 = rotated 180°, 6 = 90° clockwise, 8 = 90° counter-clockwise
    where = {1: (0, 0), 3: (1, 2), 6: (0, 1), 8: (2, 0)}[orientation]
    assert out[where].tolist() == [255, 0, 0]
