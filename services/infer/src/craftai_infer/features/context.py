"""What every feature works with: the loaded routes, the CPU pool, the picture decoder, the settings."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from craftai_infer import encodings, pictures
from craftai_infer.loader import RouteLoader
from craftai_infer.pictures import Picture
from craftai_infer.settings import InferSettings

T = TypeVar("T")


class FeatureContext:
    """Owns the CPU pool (decoding and encoding pictures: CPU work off the event loop, beside the
    model workers) and the pool that compresses the bands of one large PNG at once (separate, so
    that an encoding waiting for its bands never waits for its own pool); `close` ends both."""

    def __init__(self, settings: InferSettings, routes: RouteLoader) -> None:
        self.settings = settings
        self.routes = routes
        self.limits = pictures.Limits(settings.max_picture_pixels, settings.max_picture_side)
        cores = max(2, os.cpu_count() or 2)
        self._cpu = ThreadPoolExecutor(max_workers=cores, thread_name_prefix="pictures")
        self._bands = ThreadPoolExecutor(max_workers=cores, thread_name_prefix="png-bands")
        self._cores = cores

    async def on_cpu(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn, *args)

    def decode(self, data: bytes) -> Picture:
        """The one picture type, limits checked before any pixel is decoded (craftai_infer.pictures)."""
        return pictures.decode(data, self.limits)

    def encode(self, pixels: npt.NDArray[np.uint8] | npt.NDArray[np.bool_], encoding: encodings.Encoding) -> bytes:
        """An output in its encoding (craftai_infer.encodings); a large PNG in bands on every core."""
        return encodings.encode(pixels, encoding, self._bands, bands=self._cores)

    def close(self) -> None:
        self._cpu.shutdown(wait=False, cancel_futures=True)
        self._bands.shutdown(wait=False, cancel_futures=True)
