"""The RGBA cutout: the picture's colours with the matte as alpha.

Unlike rembg's naive cutout (which also darkens the colours where alpha is partial), colours are
kept as they are; the alpha is the matte times the picture's own alpha, if it has one, rounded
down as Pillow's ImageChops.multiply rounds it (a * b // 255).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]


def cutout(picture: U8, matte: U8) -> U8:
    """(H, W, 3) RGB or (H, W, 4) RGBA picture and (H, W) matte -> (H, W, 4) RGBA, straight alpha."""
    if picture.ndim != 3 or picture.shape[2] not in (3, 4) or matte.shape != picture.shape[:2]:
        raise ValueError(f"matte {matte.shape} and picture {picture.shape} do not fit")
    alpha = matte
    if picture.shape[2] == 4:
        alpha = (matte.astype(np.uint16) * picture[:, :, 3] // 255).astype(np.uint8)
    return np.concatenate([picture[:, :, :3], alpha[:, :, None]], axis=2)
