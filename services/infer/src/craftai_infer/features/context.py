"""What every feature works with: the loaded routes, the CPU pool, the picture decoder, the settings."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from craftai_infer import pictures
from craftai_infer.loader import RouteLoader
from craftai_infer.pictures import Picture
from craftai_infer.settings import InferSettings

T = TypeVar("T")


class FeatureContext:
    """Owns the CPU pool (decoding and encoding pictures: CPU work off the event loop, beside the
    model workers); `close` ends it."""

    def __init__(self, settings: InferSettings, routes: RouteLoader) -> None:
        self.settings = settings
        self.routes = routes
        self.limits = pictures.Limits(settings.max_picture_pixels, settings.max_picture_side)
        self._cpu = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="pictures")

    async def on_cpu(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn, *args)

    def decode(self, data: bytes) -> Picture:
        """The one picture type, limits checked before any pixel is decoded (craftai_infer.pictures)."""
        return pictures.decode(data, self.limits)

    @staticmethod
    def encode_png(pixels: npt.NDArray[np.uint8], level: int) -> bytes:
        return pictures.encode_png(pixels, level)

    def close(self) -> None:
        self._cpu.shutdown(wait=False, cancel_futures=True)
