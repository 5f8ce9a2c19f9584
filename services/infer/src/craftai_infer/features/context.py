"""What every feature works with: the loaded routes, the CPU pool, the picture decoder under the
memory budget, the settings."""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from craftai_infer import memory, pictures
from craftai_infer.loader import RouteLoader
from craftai_infer.pictures import Picture
from craftai_infer.settings import InferSettings

T = TypeVar("T")
# What a request holds per pixel of its picture while it runs, counted against the decode budget
# (craftai_infer.memory): the decoded picture and what its feature makes at the picture's size.
# image.matte: the picture (3-4 bytes) and the decoder's copy while decoding, the matte upscaled
# in float (4) and as bytes (1), the RGBA cutout (4) and the PNG encoders' rows.
MATTE_BYTES_PER_PIXEL = 16
# image.segment (open, once): the picture and its copy over white (3 + 3) and the decoder's copy;
# the encoder works at 1024x1024 whatever the picture's size.
SEGMENT_BYTES_PER_PIXEL = 10


class FeatureContext:
    """Owns the CPU pool (decoding and encoding pictures: CPU work off the event loop, beside the
    model workers) and the decode budget; `close` ends the pool."""

    def __init__(self, settings: InferSettings, routes: RouteLoader) -> None:
        self.settings = settings
        self.routes = routes
        self.limits = pictures.Limits(settings.max_picture_pixels, settings.max_picture_side)
        self.budget = memory.DecodeBudget(settings.decode_budget_bytes, settings.decode_wait_seconds)
        memory.prefer_mmap()
        self._cpu = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="pictures")

    async def on_cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the CPU pool, in this request's context (its log lines carry its ids)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._cpu, context.run, fn, *args)

    def decode(self, data: bytes) -> Picture:
        """The one picture type, limits checked before any pixel is decoded (craftai_infer.pictures)."""
        return pictures.decode(data, self.limits)

    async def decoded(self, data: bytes, bytes_per_pixel: int, *, rgb: bool = False) -> Picture:
        """The picture decoded on the CPU pool once its memory fits the decode budget (waiting its
        turn, else MEMORY_BUDGET); the budget gets it back when the array is freed. `rgb`:
        transparency composited over white."""
        head = await self.on_cpu(pictures.header, data, self.limits)
        nbytes = head.width * head.height * bytes_per_pixel
        await self.budget.admit(nbytes, f"a {head.width}x{head.height} picture")
        try:
            picture = await self.on_cpu(pictures.decode_rgb if rgb else pictures.decode, data, self.limits)
        except BaseException:
            self.budget.release(nbytes)
            raise
        self.budget.hold_until_freed(picture, nbytes)
        return picture

    @staticmethod
    def encode_png(pixels: npt.NDArray[np.uint8], level: int) -> bytes:
        return pictures.encode_png(pixels, level)

    def close(self) -> None:
        self._cpu.shutdown(wait=False, cancel_futures=True)
