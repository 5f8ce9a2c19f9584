"""What every feature works with: the loaded routes, the CPU pool, the picture decoder under the
memory budget, the settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from craftai_infer import encodings, memory, pictures, scheduling
from craftai_infer.loader import LoadedRoute, RouteLoader
from craftai_infer.pipelines.picture import Picture
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
    model workers), the pool that compresses the bands of one large PNG at once (separate, so that
    an encoding waiting for its bands never waits for its own pool) and the decode budget; `close`
    ends both pools. Both pools run interactive work first and the tenants in turns
    (craftai_infer.scheduling)."""

    def __init__(self, settings: InferSettings, routes: RouteLoader, budget_bytes: int) -> None:
        self.settings = settings
        self.routes = routes
        self.limits = pictures.Limits(settings.max_picture_pixels, settings.max_picture_side)
        self.budget = memory.DecodeBudget(budget_bytes, settings.decode_wait_seconds)
        memory.prefer_mmap()
        cores = max(2, os.cpu_count() or 2)
        self._cpu = scheduling.CpuPool(cores, "pictures", bulk_niceness=settings.bulk_niceness)
        self._bands = scheduling.CpuPool(cores, "png-bands", bulk_niceness=settings.bulk_niceness)
        self._cores = cores
        self._gpu_decoders: dict[str, pictures.JpegDecoder | None] = {}  # by device: engines.nvjpeg

    @property
    def queues(self) -> list[scheduling.WorkQueue[Any, Any]]:
        """The CPU pools' queues (their depth by class and tenant is a metric)."""
        return [self._cpu.queue, self._bands.queue]

    async def on_cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the CPU pool, in this request's class, tenant and context (its log lines
        carry its ids)."""
        return await self._cpu.run(fn, *args)

    async def header_of(self, data: bytes) -> pictures.Header:
        """The picture's size from its header (`header`) on the CPU pool as interactive work: a
        request's class may depend on it, and it costs microseconds."""
        with scheduling.classified(scheduling.WorkClass.INTERACTIVE):
            return await self.on_cpu(self.header, data)

    def picture_device(self, loaded: LoadedRoute[Any]) -> str | None:
        """Where a route wants its pictures: its GPU (`Capabilities.pinned_pictures`), or None."""
        return loaded.device if loaded.route.capabilities.pinned_pictures else None

    def decode(self, data: bytes, device: str | None = None, *, rgb: bool = False) -> Picture:
        """The one picture type, limits checked before any pixel is decoded (craftai_infer.pictures);
        `device`: the GPU of the route that takes it (`picture_device`): the picture in page-locked
        memory, a JPEG decoded on that GPU where it can be (CRAFTAI_GPU_JPEG; engines.nvjpeg);
        `rgb`: transparency composited over white (a picture without it is the decoded one itself)."""
        on_gpu = self._gpu_decoder(device) if device is not None and self.settings.gpu_jpeg else None
        decode = pictures.decode_rgb if rgb else pictures.decode
        return _pinned(decode(data, self.limits, on_gpu=on_gpu), device is not None)

    def _gpu_decoder(self, device: str) -> pictures.JpegDecoder | None:
        if device not in self._gpu_decoders:
            from craftai_infer.engines import nvjpeg  # torch: only routes on a GPU ask

            self._gpu_decoders[device] = nvjpeg.decoder(device)
        return self._gpu_decoders[device]

    def header(self, data: bytes) -> pictures.Header:
        """The picture's size from its header, limits checked, no pixel decoded."""
        return pictures.header(data, self.limits)

    @contextlib.asynccontextmanager
    async def admitted(self, nbytes: int, what: str, *, smaller: str = "") -> AsyncIterator[Callable[[object], None]]:
        """`nbytes` of the decode budget (waiting their turn, else MEMORY_BUDGET), for the block;
        the block calls the function it is given with the array whose freeing gives them back
        (when it does not, they are given back as the block ends)."""
        await self.budget.admit(nbytes, what, smaller=smaller)
        held = False

        def hold(picture: object) -> None:
            nonlocal held
            self.budget.hold_until_freed(picture, nbytes)
            held = True

        try:
            yield hold
        finally:
            if not held:
                self.budget.release(nbytes)

    async def decoded(
        self, data: bytes, bytes_per_pixel: int, *, rgb: bool = False, device: str | None = None
    ) -> Picture:
        """The picture decoded on the CPU pool once its memory fits the decode budget (waiting its
        turn, else MEMORY_BUDGET); the budget gets it back when the array is freed. `device` and
        `rgb`: as in `decode`."""
        head = await self.header_of(data)
        nbytes = head.width * head.height * bytes_per_pixel
        scale = min(1.0, (self.budget.budget_bytes / nbytes) ** 0.5)
        smaller = f"it would fit with a picture of at most {int(head.width * scale)}x{int(head.height * scale)}"
        async with self.admitted(nbytes, f"a {head.width}x{head.height} picture", smaller=smaller) as hold:
            picture = await self.on_cpu(lambda: self.decode(data, device, rgb=rgb))
            hold(picture)
        return picture

    def encode(self, pixels: npt.NDArray[np.uint8] | npt.NDArray[np.bool_], encoding: encodings.Encoding) -> bytes:
        """An output in its encoding (craftai_infer.encodings); a large PNG in bands on every core."""
        return encodings.encode(pixels, encoding, self._bands, bands=self._cores)

    def close(self) -> None:
        self._cpu.shutdown(wait=False, cancel_futures=True)
        self._bands.shutdown(wait=False, cancel_futures=True)


def _pinned(picture: Picture, pinned: bool) -> Picture:
    if not pinned or getattr(picture, "on_device", None) is not None:  # decoded on a GPU: pinned already
        return picture
    from craftai_infer.engines.staging import pinned_copy  # torch: only routes on a GPU ask

    return pinned_copy(picture)
