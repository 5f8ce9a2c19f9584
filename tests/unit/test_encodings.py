"""image.matte's encoders (craftai_infer.encodings): PNG in bands decodes to the same pixels as one
band and passes zlib's own checksum; lossless WebP is lossless; JPEG holds RGB only."""

from __future__ import annotations

import io
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from craftai_infer import encodings
from craftai_infer.encodings import Encoding

RNG = np.random.default_rng(7)


def _decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def test_adler32_of_joined_bytes_from_the_parts() -> None:
    first, second = RNG.bytes(100_003), RNG.bytes(77_777)
    combined = encodings.adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
    assert combined == zlib.adler32(first + second)
    assert encodings.adler32_combine(1, zlib.adler32(second), len(second)) == zlib.adler32(second)  # 1: no bytes


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (1, 9, 4), (401, 333), (401, 333, 3), (600, 1100, 4)])
@pytest.mark.parametrize("bands", [1, 3, 16])
def test_png_in_bands_is_the_same_picture(shape: tuple[int, ...], bands: int) -> None:
    pixels = RNG.integers(0, 256, shape, dtype=np.uint8)
    pixels[: shape[0] // 2] //= 16  # some structure, so that the filter matters
    with ThreadPoolExecutor(4) as pool:
        data = encodings.png(pixels, 1, pool, bands)
    assert np.array_equal(_decoded(data), pixels)
    body = data[data.index(b"IDAT") + 4 : data.index(b"IEND") - 8]
    assert len(zlib.decompress(body)) == shape[0] * (1 + int(np.prod(shape[1:])))  # checksum checked by zlib


def test_the_png_level_is_zlibs() -> None:
    pixels = np.tile(np.arange(256, dtype=np.uint8), (64, 4))
    stored, smallest = encodings.png(pixels, 0), encodings.png(pixels, 9)
    assert len(stored) > pixels.size > 10 * len(smallest)
    assert np.array_equal(_decoded(stored), pixels) and np.array_equal(_decoded(smallest), pixels)


def test_masks_are_1_bit_pngs_or_grey_webps() -> None:
    mask = RNG.random((30, 41)) > 0.5
    png = Image.open(io.BytesIO(encodings.encode(mask, Encoding("png"))))
    assert png.mode == "1" and np.array_equal(np.asarray(png), mask)
    webp = _decoded(encodings.encode(mask, Encoding("webp")))
    assert np.array_equal(webp[:, :, 0], mask.astype(np.uint8) * 255)


@pytest.mark.parametrize("shape", [(20, 30), (20, 30, 3), (20, 30, 4)])
def test_webp_is_lossless(shape: tuple[int, ...]) -> None:
    pixels = RNG.integers(0, 256, shape, dtype=np.uint8)
    back = _decoded(encodings.encode(pixels, Encoding("webp")))
    assert np.array_equal(back if len(shape) == 3 else back[:, :, 0], pixels)  # grey comes back as RGB


def test_jpeg_holds_rgb_only_at_the_quality_asked() -> None:
    pixels = np.full((32, 48, 3), (200, 120, 40), np.uint8)
    data = encodings.encode(pixels, Encoding("jpeg", jpeg_quality=95))
    assert data[:2] == b"\xff\xd8" and np.abs(_decoded(data).astype(int) - pixels).max() <= 3
    with pytest.raises(ValueError, match="RGB pictures only"):
        encodings.encode(np.zeros((4, 4, 4), np.uint8), Encoding("jpeg"))


@pytest.mark.parametrize("level", range(10))
def test_every_level_is_a_standard_png(level: int) -> None:
    """Levels 1 to 3 deflate with ISA-L, the others with zlib: Pillow and zlib read every one, in bands too."""
    pixels = RNG.integers(0, 256, (300, 1200, 4), dtype=np.uint8)
    pixels[100:] //= 32
    with ThreadPoolExecutor(2) as pool:
        data = encodings.png(pixels, level, pool, 2)
    assert np.array_equal(_decoded(data), pixels)
    body = data[data.index(b"IDAT") + 4 : data.index(b"IEND") - 8]
    assert len(zlib.decompress(body)) == 300 * (1 + 1200 * 4)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (40, 33, 3), (40, 33, 4)])
def test_raw_is_the_pixels_row_by_row(shape: tuple[int, ...]) -> None:
    pixels = RNG.integers(0, 256, shape, dtype=np.uint8)
    data = encodings.encode(pixels, Encoding("raw"))
    assert data == pixels.tobytes() and len(data) == pixels.size  # no header: the bytes and nothing else
    assert np.array_equal(np.frombuffer(data, np.uint8).reshape(shape), pixels)


def test_raw_of_a_view_is_its_pixels_in_row_order() -> None:
    """An array that is not C-ordered (a crop, a transpose) is still written row by row."""
    pixels = RNG.integers(0, 256, (30, 50, 4), dtype=np.uint8)
    for view in (pixels[5:25, 10:40], pixels.transpose(1, 0, 2), pixels[::2, ::3, :3]):
        data = encodings.raw(view)
        assert np.array_equal(np.frombuffer(data, np.uint8).reshape(view.shape), view)


def test_a_raw_mask_is_0_or_255_a_byte() -> None:
    mask = RNG.random((21, 13)) > 0.5
    data = encodings.encode(mask, Encoding("raw"))
    assert len(data) == mask.size and set(data) == {0, 255}
    assert np.array_equal(np.frombuffer(data, np.uint8).reshape(mask.shape), mask.astype(np.uint8) * 255)
    png = _decoded(encodings.encode(mask, Encoding("png")))  # the PNG mask: 1-bit, the same selection
    assert np.array_equal(png, np.frombuffer(data, np.uint8).reshape(mask.shape) == 255)


@pytest.mark.parametrize(
    "pixels",
    [np.zeros((4, 4, 2), np.uint8), np.zeros((4, 4), np.float32), np.zeros(16, np.uint8), np.zeros((2, 2, 2), bool)],
)
def test_raw_refuses_what_no_output_is(pixels: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected"):
        encodings.raw(pixels)
