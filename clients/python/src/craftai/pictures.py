"""What an app may give as a picture, and the bytes the SDK sends for it.

A file's bytes or its path are sent as they are (PNG, JPEG or WebP: the server decodes them). An
array of pixels, as an app holding decoded frames has them (numpy, anything with the array
interface, or a Pillow image), is sent uncompressed as a binary PPM (RGB) or PGM (grey): a dozen
bytes of header, then the rows, which the server reads without a decoder. Compressing pixels only
to have them decompressed on the other side costs more than the bytes it saves on loopback or a
fast network (a 1024x768 photo: Pillow's PNG at its default level ~225 ms to write and ~22 ms to
read, against ~0.3 and ~0.2 ms for its 2.4 MB of PPM; tools/bench/picture_input.py,
docs/PERFORMANCE.md). An RGBA array goes as a PNG at zlib level 1 (PPM has no alpha), which needs
Pillow (`pip install craftai[arrays]`).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import PIL.Image

# A file's bytes, its path, or the pixels: (H, W) grey, (H, W, 3) RGB or (H, W, 4) RGBA uint8, or a
# Pillow image.
Picture = Union[bytes, str, "os.PathLike[str]", "npt.NDArray[np.uint8]", "PIL.Image.Image"]


def read_picture(picture: Picture) -> bytes:
    """The bytes sent for `picture`: as given, read from a path, or the pixels of an array or of a
    Pillow image (`from_array`)."""
    if isinstance(picture, bytes):
        return picture
    if isinstance(picture, (str, os.PathLike)):
        return Path(picture).read_bytes()
    if type(picture).__module__.startswith("PIL."):
        return _pillow_image(picture)
    if hasattr(picture, "__array_interface__"):
        return from_array(picture)
    raise TypeError(
        f"a picture is a file's bytes, its path, an array of pixels or a Pillow image, not {type(picture).__name__}"
    )


def from_array(pixels: Any) -> bytes:
    """An (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) uint8 array as the bytes of a picture: PGM, PPM
    or (with alpha) PNG; anything else is refused in plain words before a byte is sent."""
    import numpy

    array = numpy.asarray(pixels)
    if array.dtype != numpy.uint8:
        raise ValueError(f"an array picture holds 8-bit samples (uint8), not {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ValueError(
            f"an array picture is (height, width) grey, (height, width, 3) RGB or (height, width, 4) RGBA, "
            f"not {array.shape}"
        )
    height, width = array.shape[:2]
    if height == 0 or width == 0:
        raise ValueError(f"the array picture has no pixels ({width}x{height})")
    if array.ndim == 3 and array.shape[2] == 4:
        return _png(array)
    kind = b"P5" if array.ndim == 2 else b"P6"
    return b"%s\n%d %d\n255\n" % (kind, width, height) + numpy.ascontiguousarray(array).tobytes()


def _pillow_image(image: Any) -> bytes:
    """A Pillow image as the picture its pixels mean. RGB, RGBA and grey as their arrays; colour
    spaces other than RGB (CMYK, YCbCr, ...) converted by Pillow, as the server converts a CMYK JPEG;
    every other mode (a palette, grey with alpha, 16-bit or 1-bit samples) as a lossless PNG, so that
    the server reads it as it reads such a file (16-bit greys scaled, not clipped; palette colours,
    transparency). Its array alone would be palette indices, CMYK taken for RGBA or samples too deep.
    Its EXIF orientation is not applied: these are the pixels the app holds (send the file to have
    it applied)."""
    if image.mode in ("RGB", "RGBA", "L"):
        return from_array(image)
    if image.mode in ("CMYK", "YCbCr", "LAB", "HSV"):
        return from_array(image.convert("RGB"))
    out = io.BytesIO()
    try:
        image.save(out, format="PNG", compress_level=1)
    except OSError:  # a mode PNG cannot hold (32-bit floats): Pillow's RGB of it
        return from_array(image.convert("RGB"))
    return out.getvalue()


def _png(rgba: npt.NDArray[np.uint8]) -> bytes:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is there wherever the tests run
        raise ImportError("an RGBA array is sent as a PNG, which needs Pillow: pip install craftai[arrays]") from None
    out = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(out, format="PNG", compress_level=1)
    return out.getvalue()
