"""The infer service's gRPC servicer: runtime, loading and the features' streams."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any, TypeVar

import grpc
import numpy as np
import numpy.typing as npt

from craftai_common.catalogue_client import CatalogueClient
from craftai_common.errors import (
    Reason,
    handle_errors,
    handle_stream_errors,
    invalid_argument,
    not_found,
    resource_exhausted,
)
from craftai_common.metadata import app_id
from craftai_common.observability import Collectors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store
from craftai_infer import device as devices
from craftai_infer import metrics, pictures, prompts
from craftai_infer.loader import Batching, LoadedRoute, Notices, RouteLoader
from craftai_infer.pipelines.cutout import cutout
from craftai_infer.pipelines.segment_sam import SamMasks, SamPrompt, prompt_points
from craftai_infer.routes import SegmentModel
from craftai_infer.sessions import BudgetTooSmallError, Session, SessionStore
from craftai_infer.settings import InferSettings
from craftai_wire.v1 import catalogue_pb2, common_pb2, infer_pb2, infer_pb2_grpc

log = logging.getLogger("craftai.infer")
Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = infer_pb2.DESCRIPTOR.services_by_name["InferService"].full_name
MATTE = "image.matte"
SEGMENT = "image.segment"
T = TypeVar("T")


def _progress(stage: str, done: int, total: int, message: str) -> common_pb2.Progress:
    return common_pb2.Progress(stage=stage, done=done, total=total, unit="steps", message=message)


@dataclass
class _Answer:
    """What a segmentation answer carries from its first stage to its result."""

    started: float  # perf_counter() when the request arrived
    stages: dict[str, float]  # stage -> ms
    notices: Notices
    first_step: int  # progress step of the decode
    steps: int


class InferServicer(infer_pb2_grpc.InferServiceServicer):
    def __init__(self, settings: InferSettings, catalogue: CatalogueClient) -> None:
        self.settings = settings
        self.device = devices.detect(settings.device)
        self.catalogue = catalogue
        self.routes = RouteLoader(
            catalogue,
            Store(settings.store),
            self.device,
            cpu_threads=settings.cpu_threads,
            gpu_precision=settings.gpu_precision,
            fault_injection=settings.fault_injection,
            batching=Batching(settings.batch_window_ms / 1000.0, settings.max_batch),
        )
        self.limits = pictures.Limits(settings.max_picture_pixels, settings.max_picture_side)
        # Decoding and PNG encoding: CPU work off the event loop, beside the model workers.
        self._cpu = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="pictures")
        self.sessions = SessionStore(
            settings.session_budget_bytes, settings.session_idle_seconds, max_per_app=settings.max_sessions_per_app
        )

    async def _on_cpu(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn, *args)

    # -- runtime and loading -------------------------------------------------------------

    @handle_errors
    async def GetRuntime(self, request: infer_pb2.GetRuntimeRequest, context: Context) -> infer_pb2.Runtime:
        engines = [name for name, module in (("onnxruntime", "onnxruntime"), ("torch", "torch")) if find_spec(module)]
        s = self.settings
        return infer_pb2.Runtime(
            device=self.device.preferred,
            gpu_available=self.device.gpu_available,
            gpu_name=self.device.gpu_name,
            loaded=[
                infer_pb2.LoadedRoute(route=r.ref, device=r.device, requests=r.requests, batches=r.batches)
                for r in self.routes.loaded()
            ],
            limits=infer_pb2.Limits(
                max_message_bytes=s.max_message_bytes,
                max_picture_pixels=s.max_picture_pixels,
                max_picture_side=s.max_picture_side,
                max_points=s.max_points,
                session_budget_bytes=s.session_budget_bytes,
                session_idle_seconds=s.session_idle_seconds,
            ),
            engines=engines,
        )

    async def _resolve(self, route: common_pb2.RouteRef, feature: str) -> catalogue_pb2.ResolveRouteResponse:
        if route.feature and route.feature != feature:
            raise invalid_argument(
                Reason.UNKNOWN_FEATURE, f"this RPC serves {feature}, not {route.feature}", field="route.feature"
            )
        ref = common_pb2.RouteRef(feature=feature, recipe=route.recipe, engine=route.engine)
        return await self.routes.resolve(ref)

    async def _load(
        self, resolved: catalogue_pb2.ResolveRouteResponse
    ) -> AsyncIterator[common_pb2.Progress | LoadedRoute[Any]]:
        """Yield load progress events (first use only: the load and its warm-up steps), then the route."""
        r = resolved.route
        if self.routes.is_loaded(resolved):
            yield await self.routes.get(resolved)
            return
        yield _progress("load", 0, 1, f"loading {r.recipe} ({r.engine})")
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        steps: asyncio.Queue[str] = asyncio.Queue()

        def step(message: str) -> None:  # called from the loading thread
            loop.call_soon_threadsafe(steps.put_nowait, message)

        loading = asyncio.ensure_future(self.routes.get(resolved, step))
        try:
            while not loading.done():
                waiting = asyncio.ensure_future(steps.get())
                await asyncio.wait({loading, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    yield _progress("load", 0, 1, waiting.result())
                else:
                    waiting.cancel()
        finally:
            if not loading.done():
                loading.cancel()
        loaded = loading.result()
        yield _progress(
            "load", 1, 1, f"loaded {r.recipe} on {loaded.device} in {(time.perf_counter() - started) * 1000:.0f} ms"
        )
        yield loaded

    @handle_stream_errors
    async def Load(self, request: infer_pb2.LoadRequest, context: Context) -> AsyncIterator[infer_pb2.LoadEvent]:
        if not request.route.feature:
            raise invalid_argument(Reason.UNKNOWN_FEATURE, "name the feature to load", field="route.feature")
        resolved = await self._resolve(request.route, request.route.feature)
        started = time.perf_counter()
        async for item in self._load(resolved):
            if isinstance(item, common_pb2.Progress):
                yield infer_pb2.LoadEvent(progress=item)
            else:
                yield infer_pb2.LoadEvent(
                    result=infer_pb2.LoadResult(
                        loaded=infer_pb2.LoadedRoute(route=item.ref, device=item.device),
                        load_ms=(time.perf_counter() - started) * 1000,
                    )
                )

    # -- image.matte ---------------------------------------------------------------------

    @handle_stream_errors
    async def Matte(self, request: infer_pb2.MatteRequest, context: Context) -> AsyncIterator[infer_pb2.MatteEvent]:
        started = time.perf_counter()
        stages: dict[str, float] = {}
        resolved = await self._resolve(request.route, MATTE)
        loaded: LoadedRoute[Any] | None = None
        async for item in self._load(resolved):
            if isinstance(item, common_pb2.Progress):
                yield infer_pb2.MatteEvent(progress=item)
            else:
                loaded = item
        assert loaded is not None

        t = time.perf_counter()
        yield infer_pb2.MatteEvent(progress=_progress("decode", 0, 3, "decoding the picture"))
        picture = await self._on_cpu(pictures.decode, request.picture.data, self.limits)
        stages["decode"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        yield infer_pb2.MatteEvent(progress=_progress("model", 1, 3, f"removing the background ({loaded.device})"))
        notices = Notices([])
        key = loaded.model.batch_key(picture) if hasattr(loaded.model, "batch_key") else None
        matte = await loaded.submit("matte", picture, lambda model: model.matte(picture), notices, key)
        stages["model"] = (time.perf_counter() - t) * 1000
        for notice in notices.items:
            yield infer_pb2.MatteEvent(notice=notice)

        t = time.perf_counter()
        yield infer_pb2.MatteEvent(progress=_progress("encode", 2, 3, "encoding the PNG"))
        level = self.settings.png_compress_level
        matte_png = await self._on_cpu(pictures.encode_png, matte, level)
        cutout_png = b""
        if request.want_cutout:
            cutout_png = await self._on_cpu(lambda: pictures.encode_png(cutout(picture, matte), level))
        stages["encode"] = (time.perf_counter() - t) * 1000

        yield infer_pb2.MatteEvent(
            result=infer_pb2.MatteResult(
                route=loaded.ref,
                matte_png=matte_png,
                cutout_png=cutout_png,
                width=picture.width,
                height=picture.height,
                device=loaded.device,
                timing=common_pb2.Timing(stages_ms=stages, total_ms=(time.perf_counter() - started) * 1000),
            )
        )

    # -- image.segment -------------------------------------------------------------------

    async def _picture_rgb(self, data: bytes) -> tuple[npt.NDArray[np.uint8], int, int]:
        """Decoded (limits checked first), oriented, as RGB uint8; off the event loop."""

        rgb = await self._on_cpu(pictures.decode_rgb, data, self.limits)
        return rgb, int(rgb.shape[1]), int(rgb.shape[0])

    async def _masks(self, masks: SamMasks) -> list[infer_pb2.Mask]:
        """The answer's masks as 1-bit grayscale PNGs at the picture's size, best first (a bit per pixel
        is an eighth of the bytes to compress: the PNG is most of a click's time on a GPU machine)."""
        level = self.settings.png_compress_level

        def work() -> list[bytes]:
            return [pictures.encode_mask_png(np.asarray(m, dtype=np.bool_), level) for m in masks.masks]

        pngs = await self._on_cpu(work)
        return [
            infer_pb2.Mask(
                png=png,
                predicted_iou=float(masks.ious[k]),
                empty=bool(masks.empty[k]),
                selected_fraction=float(masks.fractions[k]),
                low_res=prompts.low_res_message(masks.low_res[k]),
            )
            for k, png in enumerate(pngs)
        ]

    @handle_stream_errors
    async def OpenSession(
        self, request: infer_pb2.OpenSessionRequest, context: Context
    ) -> AsyncIterator[infer_pb2.OpenSessionEvent]:
        started = time.perf_counter()
        stages: dict[str, float] = {}
        self.sessions.check_room(app_id(context))  # TOO_MANY_SESSIONS before any work
        resolved = await self._resolve(request.route, SEGMENT)
        loaded: LoadedRoute[SegmentModel] | None = None
        async for item in self._load(resolved):
            if isinstance(item, common_pb2.Progress):
                yield infer_pb2.OpenSessionEvent(progress=item)
            else:
                loaded = item
        assert loaded is not None

        t = time.perf_counter()
        yield infer_pb2.OpenSessionEvent(progress=_progress("decode", 0, 2, "decoding the picture"))
        rgb, width, height = await self._picture_rgb(request.picture.data)
        stages["decode"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        yield infer_pb2.OpenSessionEvent(
            progress=_progress("encode", 1, 2, f"encoding the {width}x{height} picture ({loaded.device})")
        )
        notices = Notices([])
        embedding = await loaded.submit("encode", rgb, lambda model: model.encode(rgb), notices)
        stages["encode"] = (time.perf_counter() - t) * 1000
        for notice in notices.items:
            yield infer_pb2.OpenSessionEvent(notice=notice)

        try:
            opened = self.sessions.open(
                app_id(context), embedding, width=width, height=height, route=loaded, device=loaded.device
            )
        except BudgetTooSmallError as exc:
            raise resource_exhausted(
                Reason.LIMIT_REACHED,
                f"cannot keep this picture: {exc} (CRAFTAI_SESSION_BUDGET_BYTES); "
                "raise the budget, or use SegmentOnce, which keeps nothing",
            ) from exc
        yield infer_pb2.OpenSessionEvent(
            result=infer_pb2.OpenSessionResult(
                session_id=opened.session.id,
                width=width,
                height=height,
                route=loaded.ref,
                device=loaded.device,
                timing=common_pb2.Timing(stages_ms=stages, total_ms=(time.perf_counter() - started) * 1000),
                idle_seconds=self.sessions.idle_seconds,
            )
        )

    @handle_stream_errors
    async def Segment(
        self, request: infer_pb2.SegmentRequest, context: Context
    ) -> AsyncIterator[infer_pb2.SegmentEvent]:
        started = time.perf_counter()
        stages: dict[str, float] = {}
        checked = prompts.check(request.prompt, self.settings.max_points)
        session = self._session(app_id(context), request.session_id)
        prompt = checked.within(session.width, session.height)
        route: LoadedRoute[SegmentModel] = session.route

        answer = _Answer(started, stages, Notices([]), first_step=0, steps=2)
        async for event in self._decode_and_answer(route, session.embedding, prompt, checked.all_masks, answer):
            if event.HasField("result"):
                event.result.width, event.result.height, event.result.session_id = (
                    session.width,
                    session.height,
                    session.id,
                )
            yield event

    def _session(self, app: str, session_id: str) -> Session:
        if not session_id:
            raise not_found(
                Reason.SESSION_NOT_FOUND, "the request names no session (session_id is empty); open one first"
            )
        session = self.sessions.get(app, session_id)
        if session is None:
            raise not_found(
                Reason.SESSION_NOT_FOUND,
                f"session {session_id} is not open for this app: it was closed, forgotten after "
                f"{self.sessions.idle_seconds:g} s without use, or evicted to keep within the session budget; "
                "open it again with the picture",
                session_id=session_id,
            )
        return session

    @handle_stream_errors
    async def SegmentOnce(
        self, request: infer_pb2.SegmentOnceRequest, context: Context
    ) -> AsyncIterator[infer_pb2.SegmentEvent]:
        started = time.perf_counter()
        stages: dict[str, float] = {}
        checked = prompts.check(request.prompt, self.settings.max_points)
        resolved = await self._resolve(request.route, SEGMENT)
        loaded: LoadedRoute[SegmentModel] | None = None
        async for item in self._load(resolved):
            if isinstance(item, common_pb2.Progress):
                yield infer_pb2.SegmentEvent(progress=item)
            else:
                loaded = item
        assert loaded is not None

        t = time.perf_counter()
        yield infer_pb2.SegmentEvent(progress=_progress("decode", 0, 4, "decoding the picture"))
        rgb, width, height = await self._picture_rgb(request.picture.data)
        prompt = checked.within(width, height)
        stages["decode"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        yield infer_pb2.SegmentEvent(
            progress=_progress("encode", 1, 4, f"encoding the {width}x{height} picture ({loaded.device})")
        )
        answer = _Answer(started, stages, Notices([]), first_step=2, steps=4)
        embedding = await loaded.submit("encode", rgb, lambda model: model.encode(rgb), answer.notices)
        stages["encode"] = (time.perf_counter() - t) * 1000
        async for event in self._decode_and_answer(loaded, embedding, prompt, checked.all_masks, answer):
            if event.HasField("result"):
                event.result.width, event.result.height = width, height
            yield event

    async def _decode_and_answer(
        self,
        route: LoadedRoute[SegmentModel],
        embedding: Any,
        prompt: SamPrompt,
        all_masks: bool,
        answer: _Answer,
    ) -> AsyncIterator[infer_pb2.SegmentEvent]:
        """The prompt's half of Segment and SegmentOnce: decode, then the mask PNGs and the result."""
        stages, step = answer.stages, answer.first_step
        t = time.perf_counter()
        yield infer_pb2.SegmentEvent(
            progress=_progress("model", step, answer.steps, f"decoding the mask ({route.device})")
        )
        masks = await route.submit(
            "decode",
            (embedding, prompt, all_masks),
            lambda model: model.decode(embedding, prompt, all_masks=all_masks),
            answer.notices,
            prompt_points(prompt),
        )
        stages["model"] = (time.perf_counter() - t) * 1000
        for notice in answer.notices.items:
            yield infer_pb2.SegmentEvent(notice=notice)

        t = time.perf_counter()
        yield infer_pb2.SegmentEvent(progress=_progress("png", step + 1, answer.steps, "encoding the mask PNG"))
        answered = await self._masks(masks)
        stages["png"] = (time.perf_counter() - t) * 1000
        yield infer_pb2.SegmentEvent(
            result=infer_pb2.SegmentResult(
                masks=answered,
                device=route.device,
                timing=common_pb2.Timing(stages_ms=stages, total_ms=(time.perf_counter() - answer.started) * 1000),
                route=route.ref,
            )
        )

    @handle_errors
    async def CloseSession(
        self, request: infer_pb2.CloseSessionRequest, context: Context
    ) -> infer_pb2.CloseSessionResponse:
        return infer_pb2.CloseSessionResponse(closed=self.sessions.close(app_id(context), request.session_id))

    async def close(self) -> None:
        await self.sessions.stop()
        self.routes.close()
        self._cpu.shutdown(wait=False, cancel_futures=True)
        await self.catalogue.close()


def build(settings: InferSettings, *, embedded: bool = False) -> Mount:
    """Embedded (`craftai serve`), the catalogue is on this same server."""
    catalogue = CatalogueClient(settings.catalogue_address, peers=Peers(settings))
    servicer = InferServicer(settings, catalogue)
    servicer.routes.resolve = metrics.observe_resolutions(servicer.routes.resolve)  # type: ignore[method-assign,assignment]
    collectors = Collectors()

    async def start(address: str) -> None:
        if embedded:
            catalogue.address = address
        collectors.add([metrics.InferCollector(servicer.sessions, servicer.routes)])
        servicer.sessions.start_sweeping()
        log.info(
            "device: %s%s",
            servicer.device.preferred,
            f" ({servicer.device.gpu_name})" if servicer.device.gpu_available else "",
        )

    async def stop() -> None:
        collectors.close()
        await servicer.close()

    return Mount(
        name=SERVICE_NAME,
        register=lambda server: infer_pb2_grpc.add_InferServiceServicer_to_server(servicer, server),
        start=start,
        stop=stop,
    )
