"""u2netp pre- and post-processing, compatible with rembg's (so mattes match rembg's on the same file).

rembg's steps for u2net-family sessions, as published: the picture converted to RGB (an alpha
channel is dropped, not composited), resized to 320x320 with Lanczos, divided by its own maximum
(not by 255), normalised with ImageNet mean/std in float64, cast to float32 NCHW; the first
output's map min-max normalised, scaled to 8 bits by truncation, and resized back to the picture's
size with Lanczos. The resizes are Pillow's, as rembg's are.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from craftai_models import imagenet

SIZE = 320


def preprocess(picture: NDArray[np.uint8]) -> NDArray[np.float32]:
    """(H, W, 3) RGB or (H, W, 4) RGBA uint8 picture of any size -> f32[1,3,320,320]."""
    small = Image.fromarray(np.ascontiguousarray(picture[:, :, :3])).resize((SIZE, SIZE), Image.Resampling.LANCZOS)
    pixels = np.asarray(small).astype(np.float64)
    pixels = pixels / max(float(pixels.max()), 1e-6)
    normalised = (pixels - np.asarray(imagenet.MEAN)) / np.asarray(imagenet.STD)  # [320,320,3]
    batch: NDArray[np.float32] = normalised.transpose(2, 0, 1)[None].astype(np.float32)
    return batch


def postprocess(fused: NDArray[np.float32], size: tuple[int, int]) -> NDArray[np.uint8]:
    """First output f32[1,1,320,320] (sigmoid applied) -> (H, W) uint8 matte at `size` (width, height).

    A constant map (max == min) gives an empty matte, where rembg would divide by zero.
    """
    pred = fused[:, 0, :, :]
    high, low = pred.max(), pred.min()
    pred = (pred - low) / (high - low) if high > low else np.zeros_like(pred)
    matte = Image.fromarray((np.squeeze(pred) * 255).astype(np.uint8), mode="L")
    return np.asarray(matte.resize(size, Image.Resampling.LANCZOS), dtype=np.uint8)
