"""Decoding pictures: formats, limits (checked before decoding), orientation, plain errors."""

from __future__ import annotations

import io
import struct
import zlib

import grpc
import numpy as np
import pytest
from PIL import Image

from craftai_common.errors import ServiceError
from craftai_infer import encodings, pictures
from craftai_wire.vocabulary import Reason

LIMITS = pictures.Limits(max_pixels=4_000_000, max_side=4096)


def _encode(image: Image.Image, fmt: str, **kw: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **kw)
    return out.getvalue()


def _refused(data: bytes, reason: Reason) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        pictures.decode(data, LIMITS)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.reason == reason
    assert caught.value.violations and caught.value.violations[0][0] == "picture.data"
    return caught.value


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_accepted_formats(fmt: str) -> None:
    image = pictures.decode(_encode(Image.new("RGB", (31, 17), (200, 10, 10)), fmt), LIMITS)
    assert image.shape == (17, 31, 3)


def test_empty_and_garbage() -> None:
    assert "empty" in _refused(b"", Reason.EMPTY_PICTURE).message
    message = _refused(b"definitely not a picture", Reason.BAD_PICTURE).message
    assert "PNG, JPEG or WebP" in message and "binary PPM" in message


def test_other_formats_are_refused() -> None:
    _refused(_encode(Image.new("RGB", (8, 8)), "GIF"), Reason.BAD_PICTURE)
    _refused(_encode(Image.new("RGB", (8, 8)), "BMP"), Reason.BAD_PICTURE)


def test_a_binary_ppm_is_its_pixels() -> None:
    rgb = np.random.default_rng(1).integers(0, 256, (17, 31, 3), dtype=np.uint8)
    data = _encode(Image.fromarray(rgb), "PPM")
    assert data.startswith(b"P6")
    decoded = pictures.decode(data, LIMITS)
    np.testing.assert_array_equal(decoded, rgb)
    assert decoded.flags.writeable and decoded.flags.c_contiguous
    assert pictures.header(data, LIMITS) == pictures.Header(31, 17)
    # a grey PGM is an RGB picture of its greys; 16-bit samples are scaled to 8 bits as Pillow does
    grey = pictures.decode(_encode(Image.fromarray(rgb[:, :, 0]), "PPM"), LIMITS)
    np.testing.assert_array_equal(grey, np.repeat(rgb[:, :, :1], 3, axis=2))
    deep = b"P6\n2 1\n65535\n" + np.array([65535, 0, 32896, 0, 257, 65535], ">u2").tobytes()
    np.testing.assert_array_equal(pictures.decode(deep, LIMITS), [[[255, 0, 128], [0, 1, 255]]])


def test_ppm_refusals_in_plain_words() -> None:
    data = _encode(Image.new("RGB", (40, 30), (1, 2, 3)), "PPM")
    error = _refused(data[:-7], Reason.BAD_PICTURE)
    assert "truncated" in error.message and "3,600 bytes" in error.message and "3,593" in error.message
    error = _refused(b"P3 2 1 255\n1 2 3 4 5 6\n", Reason.BAD_PICTURE)  # plain text samples
    assert "P3" in error.message and "P6" in error.message
    # the declared size is checked before any pixel is read: a header alone is enough to refuse
    error = _refused(b"P6\n5000 1000\n255\n", Reason.PICTURE_TOO_LARGE)
    assert "5000x1000 pixels" in error.message


def test_truncated_png() -> None:
    data = _encode(Image.effect_noise((64, 64), 50).convert("RGB"), "PNG")
    error = _refused(data[: len(data) // 2], Reason.BAD_PICTURE)
    assert "could not be decoded" in error.message


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares a size but carries one tiny zlib stream (a decompression bomb's shape)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_declared_size_over_the_limits_is_refused_before_decoding() -> None:
    error = _refused(_png_header_only(5000, 1000), Reason.PICTURE_TOO_LARGE)
    assert "5000x1000 pixels" in error.message and "4,096 pixels on the longest side" in error.message
    error = _refused(_png_header_only(60000, 60000), Reason.PICTURE_TOO_LARGE)
    assert "limits" in error.message


def test_exif_orientation_is_applied() -> None:
    image = Image.new("RGB", (40, 20), (0, 0, 255))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    decoded = pictures.decode(_encode(image, "JPEG", exif=exif), LIMITS)
    assert decoded.shape[:2] == (40, 20)


@pytest.mark.parametrize("shape", [(1, 1), (3, 9), (17, 31), (300, 451)])
def test_mask_png_is_a_1_bit_png_pillow_reads_back(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    mask = rng.random(shape) < 0.3
    image = Image.open(io.BytesIO(encodings.encode_mask_png(mask)))
    image.load()
    assert (image.format, image.mode, image.size) == ("PNG", "1", (shape[1], shape[0]))
    np.testing.assert_array_equal(np.asarray(image), mask)


def test_mask_png_refuses_what_is_not_a_boolean_mask() -> None:
    with pytest.raises(ValueError, match="boolean mask"):
        encodings.encode_mask_png(np.zeros((4, 4), np.uint8))


# -- plain JPEGs: simplejpeg, the same pixels as Pillow ---------------------------------


def _pillow_rgb(data: bytes) -> np.ndarray:
    from craftai_infer.pipelines.picture_convert import to_rgb_uint8

    return to_rgb_uint8(pictures._loaded(pictures._opened(data, LIMITS)))  # Pillow's decode alone


JPEG_KINDS = {
    "4:4:4 q95": {"quality": 95, "subsampling": 0},
    "4:2:2 q90": {"quality": 90, "subsampling": 1},
    "4:2:0 q75": {"quality": 75, "subsampling": 2},
    "progressive": {"quality": 85, "progressive": True},
    "optimised": {"quality": 80, "optimize": True},
}


@pytest.mark.parametrize("kind", sorted(JPEG_KINDS))
@pytest.mark.parametrize("photo", ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"])
def test_plain_jpegs_decode_by_simplejpeg_to_pillows_pixels(photo: str, kind: str) -> None:
    from craftai_dev.files import sample_photo

    data = _encode(Image.open(sample_photo(photo)).convert("RGB"), "JPEG", **JPEG_KINDS[kind])
    assert pictures._plain_jpeg(pictures._opened(data, LIMITS), data)  # the simplejpeg path is taken
    assert np.array_equal(pictures.decode_rgb(data, LIMITS), _pillow_rgb(data))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_the_same_way(orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    image = Image.effect_noise((48, 32), 60).convert("RGB")
    data = _encode(image, "JPEG", quality=90, exif=exif)
    rgb = pictures.decode_rgb(data, LIMITS)
    assert rgb.shape == ((32, 48, 3) if orientation < 5 else (48, 32, 3))
    assert np.array_equal(rgb, _pillow_rgb(data))


def test_a_grey_jpeg_becomes_three_equal_channels() -> None:
    data = _encode(Image.effect_noise((40, 30), 60), "JPEG", quality=90)
    rgb = pictures.decode_rgb(data, LIMITS)
    assert rgb.shape == (30, 40, 3) and np.array_equal(rgb[:, :, 0], rgb[:, :, 2])
    assert np.array_equal(rgb, _pillow_rgb(data))


def test_other_pictures_go_through_pillow_and_truncated_jpegs_are_still_refused() -> None:
    cmyk = _encode(Image.new("CMYK", (16, 16), (10, 200, 30, 40)), "JPEG")
    assert not pictures._plain_jpeg(pictures._opened(cmyk, LIMITS), cmyk)
    assert np.array_equal(pictures.decode_rgb(cmyk, LIMITS), _pillow_rgb(cmyk))
    rgba = _encode(Image.new("RGBA", (16, 16), (10, 200, 30, 100)), "PNG")
    assert np.array_equal(pictures.decode_rgb(rgba, LIMITS), _pillow_rgb(rgba))
    whole = _encode(Image.effect_noise((64, 64), 50).convert("RGB"), "JPEG", quality=90)
    with pytest.raises(ServiceError) as caught:
        pictures.decode_rgb(whole[: len(whole) // 2], LIMITS)
    assert caught.value.reason == Reason.BAD_PICTURE
    with pytest.raises(ServiceError) as caught:
        pictures.decode_rgb(_encode(Image.new("RGB", (4097, 8)), "JPEG"), LIMITS)
    assert caught.value.reason == Reason.PICTURE_TOO_LARGE


def test_a_route_s_other_jpeg_decoder_takes_plain_jpegs_only() -> None:
    """`on_gpu` (nvJPEG for routes on a GPU: tests/gpu/test_gpu_jpeg.py) is given every complete
    8-bit RGB or grey JPEG with its EXIF orientation, and its picture is answered; PNGs, CMYK and
    truncated JPEGs never reach it, and where it answers None the CPU decodes, as without it. Here
    it is the CPU's own decoder behind a record of its calls (this machine has no GPU)."""
    import simplejpeg

    calls: list[int] = []

    def other(data: bytes, orientation: int) -> np.ndarray | None:
        calls.append(orientation)
        if orientation == 8:
            return None  # declined: the CPU path answers
        return pictures._turned(simplejpeg.decode_jpeg(data, colorspace="RGB"), orientation)

    rgb = Image.new("RGB", (31, 17), (200, 10, 10))
    for orientation in (1, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        data = _encode(rgb, "JPEG", exif=exif.tobytes())
        got = pictures.decode(data, LIMITS, on_gpu=other)
        assert calls[-1] == orientation
        np.testing.assert_array_equal(got, pictures.decode(data, LIMITS))
    assert pictures.decode(_encode(rgb.convert("L"), "JPEG"), LIMITS, on_gpu=other).shape == (17, 31, 3)
    assert len(calls) == 4
    whole = _encode(rgb, "JPEG")
    for data in (_encode(rgb, "PNG"), _encode(rgb.convert("CMYK"), "JPEG")):
        pictures.decode(data, LIMITS, on_gpu=other)
    with pytest.raises(ServiceError):
        pictures.decode(whole[: len(whole) // 2], LIMITS, on_gpu=other)
    assert len(calls) == 4


def test_no_gpu_jpeg_decoder_without_a_gpu() -> None:
    from craftai_infer.engines import nvjpeg

    assert nvjpeg.decoder("cpu") is None
    if not __import__("torch").cuda.is_available():
        assert nvjpeg.decoder("cuda:0") is None


def test_a_picture_decoded_on_a_device_is_taken_there_only() -> None:
    """`device_pixels`: the pixels a picture carries on the device it was decoded on (engines.nvjpeg's
    `DevicePicture`; here one built on the CPU), None for any other device, a view or a plain array."""
    import torch

    from craftai_infer.engines.nvjpeg import DevicePicture
    from craftai_infer.pipelines.picture import device_pixels

    pixels = np.random.default_rng(3).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    picture = pixels.copy().view(DevicePicture)
    picture.on_device = torch.from_numpy(pixels)
    assert device_pixels(picture, torch.device("cpu")) is picture.on_device
    assert device_pixels(picture, torch.device("cuda", 0)) is None
    assert device_pixels(picture[1:], torch.device("cpu")) is None  # a view is another picture
    assert device_pixels(pixels, torch.device("cpu")) is None
