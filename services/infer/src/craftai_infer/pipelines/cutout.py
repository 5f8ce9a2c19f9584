"""The RGBA cutout: the picture's colours with the matte as alpha.

Unlike rembg's naive cutout (which also darkens the colours where alpha is partial), colours are
kept as they are; the alpha is the matte times the picture's own alpha, if it has one.
"""

from __future__ import annotations

from PIL import Image, ImageChops


def cutout(picture: Image.Image, matte: Image.Image) -> Image.Image:
    if matte.size != picture.size:
        raise ValueError(f"matte {matte.size} and picture {picture.size} differ in size")
    rgba = picture.convert("RGBA")
    alpha = matte.convert("L")
    if picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info:
        alpha = ImageChops.multiply(alpha, rgba.getchannel("A"))
    rgba.putalpha(alpha)
    return rgba
