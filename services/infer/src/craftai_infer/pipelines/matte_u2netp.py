"""u2netp pre- and post-processing, compatible with rembg's (so mattes match rembg's on the same file).

rembg's steps for u2net-family sessions, as published: the picture converted to RGB (an alpha
channel is dropped, not composited), resized to 320x320 with Lanczos, divided by its own maximum
(not by 255), normalised with ImageNet mean/std in float64, cast to float32 NCHW; the first
output's map min-max normalised, scaled to 8 bits by truncation, and resized back to the picture's
size with Lanczos. The resizes are Pillow's, as rembg's are.

rembg's IS-Net and BiRefNet sessions take the same steps with another square size and
normalisation (`Steps`: `ISNET`, `ISNET_ANIME`, `BIREFNET`); the IS-Net graphs, like U²-Net's, apply
the sigmoid themselves, the BiRefNet graphs answer logits, to which rembg applies it (in float32)
before the min-max.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from craftai_models import imagenet

SIZE = 320


@dataclass(frozen=True)
class Steps:
    """What one rembg session does around its network: a `size`² picture, divided by its maximum,
    then `(x - mean) / std` per channel (float64, as rembg's arithmetic); the first output's sigmoid
    taken first where the graph answers logits (`sigmoid`)."""

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    sigmoid: bool = False


U2NET = Steps(SIZE, imagenet.MEAN, imagenet.STD)  # u2netp, u2net, u2net_human_seg, silueta
ISNET = Steps(1024, (0.5, 0.5, 0.5), (1.0, 1.0, 1.0))  # isnet-general-use (DIS)
ISNET_ANIME = Steps(1024, imagenet.MEAN, (1.0, 1.0, 1.0))  # isnet-anime (SkyTNT's IS-Net)
BIREFNET = Steps(1024, imagenet.MEAN, imagenet.STD, sigmoid=True)  # birefnet-general, -portrait, ...
BRIA = Steps(1024, imagenet.MEAN, imagenet.STD)  # bria-rmbg (BiRefNet trained by BRIA; its graph applies the sigmoid)


@dataclass(eq=False)
class Scratch:
    """The arrays `preprocess` computes in (3.7 MB at 320², 38 MB at 1024²), for a caller that runs
    one picture at a time on a thread and keeps them from call to call. Blocks of 1 MiB and more are
    mapped afresh for each use and faulted in page by page (craftai_infer.memory): computing in new
    arrays, one an operation as rembg does, faulted ~2,700 pages a u2netp picture in the service."""

    size: int = SIZE
    pixels: NDArray[np.float64] = field(init=False)
    batch: NDArray[np.float32] = field(init=False)

    def __post_init__(self) -> None:
        self.pixels = np.empty((self.size, self.size, 3), np.float64)
        self.batch = np.empty((1, 3, self.size, self.size), np.float32)


def preprocess(picture: NDArray[np.uint8], scratch: Scratch | None = None, steps: Steps = U2NET) -> NDArray[np.float32]:
    """(H, W, 3) RGB or (H, W, 4) RGBA uint8 picture of any size -> f32[1,3,S,S] (S the steps'
    size): `scratch.batch` when given (valid until the next call with it), else a fresh array.
    rembg's float64 arithmetic, operation by operation, in place."""
    side = steps.size
    small = Image.fromarray(np.ascontiguousarray(picture[:, :, :3])).resize((side, side), Image.Resampling.LANCZOS)
    work = scratch if scratch is not None and scratch.size == side else Scratch(side)
    pixels = work.pixels
    np.copyto(pixels, np.asarray(small))
    np.divide(pixels, max(float(pixels.max()), 1e-6), out=pixels)
    np.subtract(pixels, np.asarray(steps.mean), out=pixels)
    np.divide(pixels, np.asarray(steps.std), out=pixels)  # [S,S,3]
    np.copyto(work.batch[0], pixels.transpose(2, 0, 1), casting="same_kind")  # rounded as astype rounds
    return work.batch


def postprocess(fused: NDArray[np.float32], size: tuple[int, int], steps: Steps = U2NET) -> NDArray[np.uint8]:
    """First output f32[1,1,S,S] (sigmoid applied, or logits where `steps.sigmoid`) -> (H, W) uint8
    matte at `size` (width, height).

    A constant map (max == min) gives an empty matte, where rembg would divide by zero.
    """
    pred = fused[:, 0, :, :]
    if steps.sigmoid:
        pred = (1 / (1 + np.exp(-pred))).astype(np.float32, copy=False)  # rembg's expression: float32 throughout
    high, low = pred.max(), pred.min()
    pred = (pred - low) / (high - low) if high > low else np.zeros_like(pred)
    matte = Image.fromarray((np.squeeze(pred) * 255).astype(np.uint8), mode="L")
    return np.asarray(matte.resize(size, Image.Resampling.LANCZOS), dtype=np.uint8)


def preprocess_all(
    pictures: Sequence[NDArray[np.uint8]], steps: Steps = U2NET, host: Executor | None = None
) -> NDArray[np.float32]:
    """`preprocess` of each picture, f32[N,3,S,S]: on `host`'s threads where given (Pillow's resize
    releases the GIL, so a batch of large frames is resized on several cores at once)."""
    if host is None or len(pictures) < 2:
        return np.concatenate([preprocess(p, steps=steps) for p in pictures])
    return np.concatenate(list(host.map(lambda p: preprocess(p, steps=steps), pictures)))


def postprocess_all(
    maps: NDArray[np.float32],
    pictures: Sequence[NDArray[np.uint8]],
    steps: Steps = U2NET,
    host: Executor | None = None,
) -> list[NDArray[np.uint8]]:
    """`postprocess` of each first-output map f32[N,1,S,S] at its picture's size, on `host`'s
    threads where given."""

    def one(i: int) -> NDArray[np.uint8]:
        return postprocess(maps[i : i + 1], (pictures[i].shape[1], pictures[i].shape[0]), steps)

    if host is None or len(pictures) < 2:
        return [one(i) for i in range(len(pictures))]
    return list(host.map(one, range(len(pictures))))
