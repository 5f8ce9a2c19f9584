"""Decoded pictures (Pillow) -> uint8 arrays, the one picture type the pipelines take.

- EXIF orientation is applied first, so the matte is the size and way round the user sees.
- Transparent pictures (RGBA, LA, palette with transparency) stay RGBA (straight alpha), so that a
  cutout keeps their alpha; a network that sees colours only gets them composited over white
  (`over_white`): the colours under transparent pixels are arbitrary (often black) and would
  otherwise look like content to the network.
- 16-bit greys (Pillow's "I;16*" modes, and "I" as Pillow opens 16-bit PNGs) are scaled
  v / 257 (65535 -> 255) and rounded, rather than clipped at 255 as Pillow's convert would.
- Float pictures ("F") are taken as [0, 1] when their maximum is <= 1, else as [0, 255].
- CMYK and every other mode use Pillow's own conversion to RGB (CMYK: without colour management).
"""

from __future__ import annotations

import numpy as np
from PIL import ExifTags, Image, ImageOps

__all__ = ["has_alpha", "oriented", "over_white", "to_array", "to_rgb_uint8"]

_BACKDROP = 255.0  # white


def _grey_to_rgb(grey: np.ndarray) -> np.ndarray:
    g = np.clip(np.floor(grey + 0.5), 0, 255).astype(np.uint8)
    return np.repeat(g[:, :, None], 3, axis=2)


def oriented(picture: Image.Image) -> Image.Image:
    """The picture turned the way its EXIF orientation says it is shown; the picture itself when it
    needs no turn (ImageOps.exif_transpose copies every picture, holding the GIL)."""
    if picture.getexif().get(ExifTags.Base.Orientation, 1) in (None, 1):
        return picture
    return ImageOps.exif_transpose(picture)


def to_array(picture: Image.Image) -> np.ndarray:
    """The one picture type of infer from a decoded picture, EXIF orientation honoured: (H, W, 3)
    uint8 RGB, or (H, W, 4) RGBA with straight alpha when the picture has transparency."""
    picture = oriented(picture)
    mode = picture.mode
    if mode.startswith("I;16") or mode == "I":
        return _grey_to_rgb(np.asarray(picture, dtype=np.float64) / 257.0)
    if mode == "F":
        values = np.asarray(picture, dtype=np.float64)
        peak = float(np.nanmax(values)) if values.size else 0.0
        return _grey_to_rgb(np.nan_to_num(values) * (255.0 if peak <= 1.0 else 1.0))
    if has_alpha(picture):
        rgba: np.ndarray = np.array(picture.convert("RGBA"), dtype=np.uint8)  # straight alpha, whatever the mode
        return rgba
    rgb = picture if mode == "RGB" else picture.convert("RGB")
    out: np.ndarray = np.array(rgb, dtype=np.uint8)  # one copy, writable
    return out


def has_alpha(picture: Image.Image) -> bool:
    return picture.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in picture.info


def over_white(picture: np.ndarray) -> np.ndarray:
    """(H, W, 3) RGB of a picture of the one type: an RGBA one composited over white, an RGB one as it is."""
    if picture.shape[2] == 3:
        return picture
    rgba = picture.astype(np.float32)
    alpha = rgba[:, :, 3:4] / 255.0
    rgb = rgba[:, :, :3] * alpha + (1.0 - alpha) * _BACKDROP
    composited: np.ndarray = np.clip(np.floor(rgb + 0.5), 0, 255).astype(np.uint8)
    return composited


def to_rgb_uint8(picture: Image.Image) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a decoded picture, EXIF orientation honoured, transparency over white."""
    return over_white(to_array(picture))
