"""u2net_cloth_seg's post-processing, rembg's (its `Unet2ClothSession`), so that each part's matte is
rembg's mask byte for byte on the same file.

The network (levindabhi's cloth segmentation: U²-Net with four output channels) is fed as rembg's
U²-Net sessions feed theirs (craftai_infer.pipelines.matte_u2netp, `CLOTH`: 768², ImageNet
normalisation of the picture divided by its own maximum). Its first output's four class logits
(0 background, 1 upper-body, 2 lower-body, 3 full-body clothes) become a class map by argmax, an
8-bit 'L' picture resized to the picture's size with Lanczos, as rembg does: Lanczos is not
nearest-neighbour, so where classes meet its ringing gives pixels of another class (a stray
"lower" between "background" and "full"), and of values past the last class, which rembg's palette
maps to 0; both are kept, being rembg's answer. A part's matte is 255 where the map holds its class,
else 0, made through a palette as rembg makes it (Pillow's P -> RGB -> L conversion).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from craftai_infer.pipelines import matte_u2netp
from craftai_models import imagenet

CLASSES = 4  # background, upper, lower, full
CLOTH = matte_u2netp.Steps(768, imagenet.MEAN, imagenet.STD)


def class_map(logits: NDArray[np.float32], size: tuple[int, int]) -> Image.Image:
    """First output f32[1, CLASSES, S, S] -> the class map, an 'L' picture at `size` (width, height)."""
    classes = np.argmax(logits, axis=1)[0]
    return Image.fromarray(classes.astype(np.uint8), mode="L").resize(size, Image.Resampling.LANCZOS)


def part_matte(classes: Image.Image, index: int) -> NDArray[np.uint8]:
    """The (H, W) uint8 matte of class `index` (1..3): 255 where the map holds it, else 0."""
    palette = [0] * (3 * CLASSES)
    palette[3 * index : 3 * index + 3] = [255, 255, 255]
    chosen = classes.copy()
    chosen.putpalette(palette)
    return np.asarray(chosen.convert("RGB").convert("L"), dtype=np.uint8)


def mattes(logits: NDArray[np.float32], size: tuple[int, int], indices: Sequence[int]) -> NDArray[np.uint8]:
    """The mattes of the classes `indices`, in that order, stacked top to bottom: (H·len(indices), W),
    as rembg's `remove(only_mask=True)` stacks its session's masks."""
    classes = class_map(logits, size)
    return np.concatenate([part_matte(classes, index) for index in indices], axis=0)
