"""Decoding pictures sent by apps: format, size limits and orientation, in plain words.

Only still PNG, JPEG and WebP pictures are accepted (an animated PNG or WebP is refused: send one
frame; a GIF is not one of the formats), and uncompressed pixels as a binary PPM or PGM (Netpbm
P6 RGB or P5 grey: a few bytes of header, then the rows; what the SDK sends for an array, where a
PNG's decode would cost more than its bytes save on a fast link). The declared size is checked
against the limits before any pixel is decoded, so a decompression bomb costs nothing. EXIF orientation is applied, as
apps show the picture that way. Every route gets 8-bit pictures: 16-bit greys are scaled
(v / 257, as picture_convert does) rather than clipped; CMYK JPEGs are converted by the pipelines
with Pillow's conversion (no colour management). Whatever a damaged file makes the decoder raise,
the app is told BAD_PICTURE in plain words and the server goes on serving. Pillow reads every
header and decodes every picture, except complete 8-bit JPEGs, which simplejpeg decodes to the
same pixels without holding the GIL; either way every feature gets the same `Picture` array.

Logs: nothing here writes to stderr. Pillow's warnings (thousands for an EXIF block of bad tags)
go through `warnings`, which the services route into their JSON log, at most one line per request
(craftai_common.observability); no `warnings.catch_warnings` here, which is not thread-safe and
resets the once-only memory of every warning. libjpeg-turbo's own messages ("Corrupt JPEG data")
never reach stderr: simplejpeg turns them into the BAD_PICTURE error and Pillow's decoder keeps
them to itself (tests/integration/test_hardening.py reads every line a server writes).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt
import simplejpeg
from PIL import ExifTags, Image, ImageFile, UnidentifiedImageError

from craftai_common.errors import invalid_argument
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.picture_convert import oriented, over_white, to_array
from craftai_wire.vocabulary import Reason

FORMATS = ("PNG", "JPEG", "WEBP", "PPM")
# The Netpbm kinds accepted: binary grey and RGB (Pillow also reads the plain-text ones, a
# decimal number per sample, and 1-bit P4: no app sends those for speed, so they are refused).
NETPBM_MAGIC = (b"P5", b"P6")
NOT_A_PICTURE = "the picture is not a PNG, JPEG or WebP file, nor a binary PPM (or it is damaged)"
# A picture over Pillow's own bomb threshold is ours to refuse (PICTURE_TOO_LARGE), never a warning
# printed on stderr: set once for the process, as a filter set per call would not be thread-safe.
warnings.filterwarnings("error", category=Image.DecompressionBombWarning)
# A plain JPEG's other decoder (the data, its EXIF orientation) -> the picture, or None where it
# cannot decode it (the CPU's then does): nvJPEG's for routes on a GPU (craftai_infer.engines.nvjpeg).
JpegDecoder = Callable[[bytes, int], "Picture | None"]


@dataclass(frozen=True)
class Limits:
    max_pixels: int
    max_side: int

    def admit(self, width: int, height: int) -> bool:
        """Whether a picture (or a raw frame) of this size is within both limits."""
        return width * height <= self.max_pixels and max(width, height) <= self.max_side

    def __str__(self) -> str:
        """How a refusal says them."""
        return f"the limits are {self.max_pixels:,} pixels and {self.max_side:,} pixels on the longest side"


@dataclass(frozen=True)
class Header:
    """What a picture's header says, read before any pixel: for memory admission."""

    width: int
    height: int


def header(data: bytes, limits: Limits) -> Header:
    """The picture's size (limits checked as `decode` checks them), no pixel decoded."""
    image = _opened(data, limits)
    return Header(image.width, image.height)


def decode(data: bytes, limits: Limits, *, on_gpu: JpegDecoder | None = None) -> Picture:
    """The picture of every feature: (H, W, 3) RGB uint8, or (H, W, 4) RGBA (straight alpha) when it
    has transparency, oriented as its EXIF says; INVALID_ARGUMENT in plain words otherwise.
    `on_gpu`: a complete 8-bit RGB or grey JPEG is given to it first (a route's GPU decodes it).

    A complete 8-bit RGB or grey JPEG (most photos) is decoded by simplejpeg: the same libjpeg-turbo
    decode (accurate DCT, fancy upsampling), the same pixels as Pillow (tests/unit/test_pictures.py),
    straight into an array without holding the GIL, where Pillow's copy of its pixels into an array
    holds it, which capped a server's pictures a second however many cores it had
    (tools/bench/decode_threads.py; docs/PERFORMANCE.md, "GPU speed: batching, CUDA graphs,
    device-side pre/post-processing, and the peer benchmark"). It decodes strictly: libjpeg's
    "corrupt data" warnings refuse the picture as BAD_PICTURE, as Pillow refuses it, so every
    feature answers a damaged JPEG the same way. A complete CMYK JPEG is checked by the same strict
    decode, then converted by Pillow (which alone would answer a damaged one with grey where its
    data was unreadable). Everything else goes through Pillow.
    """
    image = _opened(data, limits)
    if image.format == "PPM":
        return _netpbm(image, data)
    if _plain_jpeg(image, data):
        orientation = int(image.getexif().get(ExifTags.Base.Orientation, 1) or 1)
        if on_gpu is not None and (decoded := on_gpu(data, orientation)) is not None:
            return decoded
        return _turned(_strictly(data, "RGB"), orientation)
    if image.format == "JPEG" and image.mode == "CMYK" and _complete(data):
        _strictly(data, "CMYK")  # checked as strictly as the others; the pixels are Pillow's conversion
    return to_array(_loaded(image))


def _netpbm(image: Image.Image, data: bytes) -> Picture:
    """A binary PPM's 8-bit RGB rows are the picture as they are (one copy, no decoder); a PGM, or
    samples of more than 8 bits, go through Pillow (greys to RGB, 16-bit samples scaled)."""
    tiles = cast(ImageFile.ImageFile, image).tile
    tile = tiles[0] if len(tiles) == 1 else None
    if tile is None or tile.codec_name != "raw" or tile.args != "RGB":
        return to_array(_loaded(image))
    need = image.width * image.height * 3
    if len(data) - tile.offset < need:
        raise invalid_argument(
            Reason.BAD_PICTURE,
            f"the PPM picture is truncated: {image.width}x{image.height} RGB needs {need:,} bytes of pixels "
            f"after its header, it has {max(0, len(data) - tile.offset):,}",
            field="picture.data",
        )
    rows = np.frombuffer(data, np.uint8, count=need, offset=tile.offset)
    return rows.reshape(image.height, image.width, 3).copy()  # the request's own, writable


def _strictly(data: bytes, colorspace: str) -> npt.NDArray[np.uint8]:
    """simplejpeg's strict decode: any of libjpeg's "corrupt data" warnings refuses the picture
    (Pillow's decoder passes over them and paints what it could not read grey)."""
    try:
        decoded: npt.NDArray[np.uint8] = simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True)
    except ValueError as exc:
        raise invalid_argument(
            Reason.BAD_PICTURE, f"the JPEG picture could not be decoded: {exc}", field="picture.data"
        ) from exc
    return decoded


def decode_rgb(data: bytes, limits: Limits, *, on_gpu: JpegDecoder | None = None) -> npt.NDArray[np.uint8]:
    """The picture as (H, W, 3) RGB uint8, transparency composited over white, checked as `decode` checks it."""
    return over_white(decode(data, limits, on_gpu=on_gpu))


def _plain_jpeg(image: Image.Image, data: bytes) -> bool:
    """A JPEG whose pixels simplejpeg gives exactly as Pillow: 8-bit RGB (YCbCr) or grey, and complete
    (ending with the EOI marker: Pillow refuses a truncated one with its own words)."""
    return image.format == "JPEG" and image.mode in ("RGB", "L") and _complete(data)


def _complete(data: bytes) -> bool:
    """The JPEG ends with its EOI marker (a truncated one is Pillow's to refuse, in its own words)."""
    return data.rstrip(b"\0").endswith(b"\xff\xd9")


def _turned(pixels: npt.NDArray[np.uint8], orientation: int | None) -> npt.NDArray[np.uint8]:
    """The picture turned the way its EXIF orientation (1..8) says it is shown, as Pillow's
    exif_transpose turns it."""
    views = {
        2: lambda a: a[:, ::-1],  # mirrored left-right
        3: lambda a: a[::-1, ::-1],  # rotated 180°
        4: lambda a: a[::-1],  # mirrored top-bottom
        5: lambda a: a.transpose(1, 0, 2),  # transposed
        6: lambda a: a.transpose(1, 0, 2)[:, ::-1],  # rotated 90° clockwise to show
        7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # transversed
        8: lambda a: a.transpose(1, 0, 2)[::-1],  # rotated 90° counter-clockwise to show
    }
    turn = views.get(orientation or 1)
    return pixels if turn is None else np.ascontiguousarray(turn(pixels))


def _opened(data: bytes, limits: Limits) -> Image.Image:
    """The picture's header read and checked (format, size limits, one frame); no pixel decoded."""
    if not data:
        raise invalid_argument(Reason.EMPTY_PICTURE, "the picture is empty (0 bytes)", field="picture.data")
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_large(None, limits) from exc
    except UnidentifiedImageError as exc:
        raise invalid_argument(Reason.BAD_PICTURE, NOT_A_PICTURE, field="picture.data") from exc
    except Exception as exc:  # a damaged header can make Pillow raise nearly anything
        raise invalid_argument(
            Reason.BAD_PICTURE,
            f"the picture's header is damaged ({type(exc).__name__}); send a PNG, JPEG or WebP file or a binary PPM",
            field="picture.data",
        ) from exc
    if image.format == "PPM" and data[:2] not in NETPBM_MAGIC:
        raise invalid_argument(
            Reason.BAD_PICTURE,
            f"the Netpbm picture is of kind {data[:2].decode('ascii', 'replace')}; only binary P6 (RGB) and P5 "
            "(grey) are accepted",
            field="picture.data",
        )
    width, height = image.size
    if width == 0 or height == 0:
        raise invalid_argument(
            Reason.EMPTY_PICTURE, f"the picture has no pixels ({width}x{height})", field="picture.data"
        )
    if not limits.admit(width, height):
        raise _too_large((width, height), limits)
    frames = int(getattr(image, "n_frames", 1))
    if frames > 1:
        raise invalid_argument(
            Reason.BAD_PICTURE,
            f"the {image.format} picture is animated ({frames} frames); send a still picture (one frame)",
            field="picture.data",
        )
    return image


def _loaded(image: Image.Image) -> Image.Image:
    """The pixels decoded and oriented (to_array then brings 16-bit and float greys to 8 bits)."""
    try:
        image.load()
        turned = oriented(image)
    except MemoryError:
        raise
    except Exception as exc:  # truncated or corrupt data: OSError mostly, but not only
        raise invalid_argument(
            Reason.BAD_PICTURE, f"the {image.format} picture could not be decoded: {exc}", field="picture.data"
        ) from exc
    return turned


def _too_large(size: tuple[int, int] | None, limits: Limits) -> Exception:
    found = f"is {size[0]}x{size[1]} pixels" if size else "declares a size far beyond any limit (a decompression bomb?)"
    return invalid_argument(
        Reason.PICTURE_TOO_LARGE,
        f"the picture {found}; {limits}",
        field="picture.data",
    )
