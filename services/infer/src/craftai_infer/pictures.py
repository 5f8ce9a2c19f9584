"""Decoding pictures sent by apps: format, size limits and orientation, in plain words.

Only PNG, JPEG and WebP are accepted. The declared size is checked against the limits before
any pixel is decoded, so a decompression bomb costs nothing. EXIF orientation is applied, as
apps show the picture that way.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from craftai_common.errors import Reason, invalid_argument

FORMATS = ("PNG", "JPEG", "WEBP")


@dataclass(frozen=True)
class Limits:
    max_pixels: int
    max_side: int


def decode(data: bytes, limits: Limits) -> Image.Image:
    """The picture, oriented as its EXIF says; raises INVALID_ARGUMENT with plain words."""
    if not data:
        raise invalid_argument(Reason.EMPTY_PICTURE, "the picture is empty (0 bytes)", field="picture.data")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError as exc:
        raise invalid_argument(
            Reason.BAD_PICTURE, "the picture is not a PNG, JPEG or WebP file (or it is damaged)", field="picture.data"
        ) from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_large(None, limits) from exc
    width, height = image.size
    if width == 0 or height == 0:
        raise invalid_argument(
            Reason.EMPTY_PICTURE, f"the picture has no pixels ({width}x{height})", field="picture.data"
        )
    if width * height > limits.max_pixels or max(width, height) > limits.max_side:
        raise _too_large((width, height), limits)
    try:
        image.load()
        oriented = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise invalid_argument(
            Reason.BAD_PICTURE, f"the {image.format} picture could not be decoded: {exc}", field="picture.data"
        ) from exc
    return oriented


def _too_large(size: tuple[int, int] | None, limits: Limits) -> Exception:
    found = f"{size[0]}x{size[1]} pixels" if size else "too many pixels"
    return invalid_argument(
        Reason.PICTURE_TOO_LARGE,
        f"the picture is {found}; the limits are {limits.max_pixels:,} pixels and {limits.max_side:,} pixels "
        "on the longest side",
        field="picture.data",
    )


def encode_png(image: Image.Image, compress_level: int = 1) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=compress_level)
    return out.getvalue()


def encode_mask_png(mask: np.ndarray, compress_level: int = 1) -> bytes:
    """A boolean (H, W) mask as a 1-bit grayscale PNG, written directly (filter 0 on packed rows).

    Pillow writes the same file format but tries every PNG filter on every row; for a mask at a
    photo's size that is most of a click's time on a GPU machine (7.5 ms against 1.5 ms for
    2048x1536 on one core here), and filters gain nothing on packed bits.
    """
    if mask.ndim != 2 or mask.dtype != np.bool_:
        raise ValueError(f"expected an (H, W) boolean mask, got {mask.dtype} {mask.shape}")
    height, width = mask.shape
    rows = np.packbits(mask, axis=1)  # 1 = selected = white, most significant bit first
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()  # filter byte 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, grayscale, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, compress_level))
        + chunk(b"IEND", b"")
    )
