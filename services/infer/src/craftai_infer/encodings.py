"""Encoding image.matte's outputs: PNG, lossless WebP, JPEG, or raw pixels (docs/API.md states what
each costs).

- PNG: 8-bit grayscale, RGB or RGBA (a boolean mask: 1-bit grayscale, `encode_mask_png`),
  every row with the "Up" filter, zlib at the level asked. A large picture is compressed in
  horizontal bands on several threads at once (zlib releases the GIL): each band is a raw deflate
  stream ended by a sync flush, the bands are joined into the one zlib stream of the IDAT chunk and
  their Adler-32 checksums combined; the file is an ordinary PNG. Pillow's encoder tries five
  filters on every row on one thread; one band with the "Up" filter is faster, and bands on
  several cores faster still, for a file a few percent larger. Levels 1 to 3 deflate with ISA-L
  (the `isal` package: Intel's deflate, its levels 1 to 3): several times zlib level 1's speed,
  the file a little smaller (docs/PERFORMANCE.md, "PNG encode of large outputs (ISA-L)");
  level 0 (stored) and 4 to 9 are zlib's. Either way the stream is standard deflate.
- WebP: lossless, Pillow (libwebp) at the fastest effort (method 0); grayscale outputs are stored
  as RGB (WebP has no grayscale); sides up to 16383 (WebP's limit).
- JPEG: simplejpeg (libjpeg-turbo, GIL released), 4:2:0 chroma, RGB outputs only.
- raw: the array's bytes as they are, row by row, no header (MATTE_FORMAT_RAW): for a caller that
  wants pixels, nothing to compress here nor to decode there; a boolean mask as 0 or 255 a byte,
  so that every one-channel output reads alike.
"""

from __future__ import annotations

import io
import itertools
import struct
import zlib
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import simplejpeg
from isal import isal_zlib
from PIL import Image

__all__ = ["WEBP_MAX_SIDE", "Encoding", "Format", "adler32_combine", "encode", "png", "raw"]

Format = Literal["png", "webp", "jpeg", "raw"]
WEBP_MAX_SIDE = 16383
BAND_BYTES = 1 << 20  # a band is worth a thread from this many bytes of filtered rows
_ADLER_BASE = 65521
_COLOUR_TYPES = {1: 0, 3: 2, 4: 6}  # channels -> PNG colour type (grey, RGB, RGBA)
ISAL_LEVELS = range(1, 4)  # the levels deflated by ISA-L (module doc)


@dataclass(frozen=True)
class Encoding:
    format: Format = "png"
    png_level: int = 1  # zlib 0..9
    jpeg_quality: int = 90  # 1..100


def adler32_combine(first: int, second: int, second_length: int) -> int:
    """The Adler-32 of two byte strings joined, from theirs: with adler = B·2¹⁶ + A,
    A = A₁ + A₂ − 1 and B = B₁ + B₂ + len₂·(A₁ − 1), modulo 65521."""
    a1, b1 = first & 0xFFFF, first >> 16
    a2, b2 = second & 0xFFFF, second >> 16
    a = (a1 + a2 - 1) % _ADLER_BASE
    b = (b1 + b2 + second_length * (a1 - 1)) % _ADLER_BASE
    return (b << 16) | a


SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, *body: bytes) -> list[bytes]:
    """A PNG chunk as the parts of one join: its body's parts are never concatenated here (a large
    picture's compressed data would be copied while the interpreter lock is held)."""
    crc = zlib.crc32(kind)
    for part in body:
        crc = zlib.crc32(part, crc)
    return [struct.pack(">I", sum(len(part) for part in body)), kind, *body, struct.pack(">I", crc & 0xFFFFFFFF)]


def _file(header: bytes, *data: bytes) -> bytes:
    """The PNG file of an IHDR `header` and the zlib stream in parts `data`, made in one copy."""
    return b"".join([SIGNATURE, *_chunk(b"IHDR", header), *_chunk(b"IDAT", *data), *_chunk(b"IEND")])


def _band(
    rows: npt.NDArray[np.uint8], above: npt.NDArray[np.uint8] | None, level: int, last: bool
) -> tuple[bytes, int, int]:
    """Rows (n, row bytes) filtered with "Up" against the row above them (zeros above the first
    row of the picture), deflated raw: (the deflate bytes, their Adler-32, the filtered length)."""
    filtered = np.empty((rows.shape[0], rows.shape[1] + 1), np.uint8)
    filtered[:, 0] = 2  # the filter type byte: Up
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])
    if above is None:
        filtered[0, 1:] = rows[0]
    else:
        np.subtract(rows[0], above, out=filtered[0, 1:])
    codec = isal_zlib if level in ISAL_LEVELS else zlib
    deflate = codec.compressobj(level, codec.DEFLATED, -15)
    data = deflate.compress(filtered.data) + deflate.flush(codec.Z_FINISH if last else codec.Z_SYNC_FLUSH)
    return data, zlib.adler32(filtered.data), filtered.size


def png(pixels: npt.NDArray[np.uint8], level: int = 1, pool: Executor | None = None, bands: int = 1) -> bytes:
    """(H, W) grey, (H, W, 3) RGB or (H, W, 4) RGBA uint8 -> PNG bytes, in up to `bands` bands on `pool`."""
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[2] not in (3, 4)):
        raise ValueError(f"expected (H, W), (H, W, 3) or (H, W, 4) uint8 pixels, got {pixels.dtype} {pixels.shape}")
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    rows = np.ascontiguousarray(pixels).reshape(height, width * channels)
    count = max(1, min(bands, height, rows.size // BAND_BYTES)) if pool is not None else 1
    edges = [height * i // count for i in range(count + 1)]
    work = [
        (rows[lo:hi], rows[lo - 1] if lo > 0 else None, level, i == count - 1)
        for i, (lo, hi) in enumerate(itertools.pairwise(edges))
    ]
    done: Sequence[tuple[bytes, int, int]]
    if pool is None or count == 1:
        done = [_band(*item) for item in work]
    else:
        done = list(pool.map(lambda item: _band(*item), work))
    checksum = 1
    for _data, adler, length in done:
        checksum = adler32_combine(checksum, adler, length)
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOUR_TYPES[channels], 0, 0, 0)
    return _file(header, b"\x78\x01", *(data for data, _, _ in done), struct.pack(">I", checksum))


def _webp(pixels: npt.NDArray[np.uint8]) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="WEBP", lossless=True, method=0, quality=0, exact=True)
    return out.getvalue()


def raw(pixels: npt.NDArray[np.uint8] | npt.NDArray[np.bool_]) -> bytes:
    """The pixels' bytes row by row ((H, W), (H, W, 3) or (H, W, 4)); a boolean mask as 0 or 255."""
    if pixels.dtype == np.bool_:
        if pixels.ndim != 2:
            raise ValueError(f"expected an (H, W) boolean mask, got {pixels.shape}")
        return (pixels.view(np.uint8) * np.uint8(255)).tobytes()
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[2] not in (3, 4)):
        raise ValueError(f"expected (H, W), (H, W, 3) or (H, W, 4) uint8 pixels, got {pixels.dtype} {pixels.shape}")
    return pixels.tobytes()  # C order whatever the array's strides


def encode(
    pixels: npt.NDArray[np.uint8] | npt.NDArray[np.bool_],
    encoding: Encoding,
    pool: Executor | None = None,
    bands: int = 1,
) -> bytes:
    """An output in its encoding: a boolean mask, a grey matte, an RGB or RGBA picture (module doc)."""
    if encoding.format == "raw":
        return raw(pixels)
    if encoding.format == "jpeg":
        if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
            raise ValueError(f"JPEG holds RGB pictures only, got {pixels.dtype} {pixels.shape}")
        return bytes(simplejpeg.encode_jpeg(np.ascontiguousarray(pixels), encoding.jpeg_quality, "RGB", "420"))
    if pixels.dtype == np.bool_:
        if encoding.format == "png":
            return encode_mask_png(pixels, encoding.png_level)
        return _webp(pixels.astype(np.uint8) * np.uint8(255))
    grey_or_colour: npt.NDArray[np.uint8] = pixels.astype(np.uint8, copy=False)
    if encoding.format == "webp":
        return _webp(grey_or_colour)
    return png(grey_or_colour, encoding.png_level, pool, bands)


def encode_mask_png(mask: np.ndarray, compress_level: int = 1) -> bytes:
    """A boolean (H, W) mask as a 1-bit grayscale PNG, written directly (filter 0 on packed rows).

    Pillow writes the same file format but tries every PNG filter on every row; for a mask at a
    photo's size that was most of a click's time on a GPU machine, and filters gain nothing on
    packed bits. Deflated as the other PNGs (ISA-L at levels 1 to 3: faster than zlib level 1 on a
    speckled mask, the file smaller; docs/PERFORMANCE.md, "The last GPU run of the session").
    """
    if mask.ndim != 2 or mask.dtype != np.bool_:
        raise ValueError(f"expected an (H, W) boolean mask, got {mask.dtype} {mask.shape}")
    height, width = mask.shape
    rows = np.packbits(mask, axis=1)  # 1 = selected = white, most significant bit first
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()  # filter byte 0 per row

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, grayscale, no interlace
    return _file(header, (isal_zlib if compress_level in ISAL_LEVELS else zlib).compress(raw, compress_level))
