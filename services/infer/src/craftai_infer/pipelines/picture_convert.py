"""Decoded pictures (Pillow) -> RGB uint8 arrays, the only input the pipelines take.

- EXIF orientation is applied first, so the matte is the size and way round the user sees.
- Transparent pictures (RGBA, LA, palette with transparency) are composited over white: the
  colours under transparent pixels are arbitrary (often black) and would otherwise look like
  content to the network.
- 16-bit greys (Pillow's "I;16*" modes, and "I" as Pillow opens 16-bit PNGs) are scaled
  v / 257 (65535 -> 255) and rounded, rather than clipped at 255 as Pillow's convert would.
- Float pictures ("F") are taken as [0, 1] when their maximum is <= 1, else as [0, 255].
- CMYK and every other mode use Pillow's own conversion to RGB (CMYK: without colour management).
"""

from __future__ import annotations

import numpy as np
from PIL import ExifTags, Image, ImageOps

__all__ = ["oriented", "to_rgb_uint8"]

_BACKDROP = 255.0  # white


def _grey_to_rgb(grey: np.ndarray) -> np.ndarray:
    g = np.clip(np.floor(grey + 0.5), 0, 255).astype(np.uint8)
    return np.repeat(g[:, :, None], 3, axis=2)


def oriented(picture: Image.Image) -> Image.Image:
    """The picture turned the way its EXIF orientation says it is shown; the picture itself when it
    needs no turn (ImageOps.exif_transpose copies every picture: 8 ms at 2048x1536, GIL held)."""
    if picture.getexif().get(ExifTags.Base.Orientation, 1) in (None, 1):
        return picture
    return ImageOps.exif_transpose(picture)


def to_rgb_uint8(picture: Image.Image) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a decoded picture, EXIF orientation honoured."""
    picture = oriented(picture)
    mode = picture.mode
    if mode.startswith("I;16") or mode == "I":
        return _grey_to_rgb(np.asarray(picture, dtype=np.float64) / 257.0)
    if mode == "F":
        values = np.asarray(picture, dtype=np.float64)
        peak = float(np.nanmax(values)) if values.size else 0.0
        return _grey_to_rgb(np.nan_to_num(values) * (255.0 if peak <= 1.0 else 1.0))
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in picture.info
    if has_alpha:
        rgba = np.asarray(picture.convert("RGBA"), dtype=np.float32)  # straight alpha, whatever the mode
        alpha = rgba[:, :, 3:4] / 255.0
        rgb = rgba[:, :, :3] * alpha + (1.0 - alpha) * _BACKDROP
        composited: np.ndarray = np.clip(np.floor(rgb + 0.5), 0, 255).astype(np.uint8)
        return composited
    rgb = picture if mode == "RGB" else picture.convert("RGB")
    out: np.ndarray = np.array(rgb, dtype=np.uint8)  # one copy, writable
    return out
