"""The infer service's gRPC servicer: it translates messages; the features (craftai_infer.features) do the work."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from importlib.util import find_spec
from typing import Any

import grpc

from craftai_common.catalogue_client import CatalogueClient
from craftai_common.errors import handle_errors, handle_stream_errors, invalid_argument
from craftai_common.metadata import app_id
from craftai_common.observability import Collectors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store
from craftai_infer import device as devices
from craftai_infer import memory, metrics
from craftai_infer.features import run as runs
from craftai_infer.features.context import FeatureContext
from craftai_infer.features.cutout import CutoutFeature
from craftai_infer.features.frames import FramesFeature
from craftai_infer.features.matte import MatteFeature
from craftai_infer.features.segment import SegmentFeature
from craftai_infer.loader import Batching, RouteLoader
from craftai_infer.replica import check_unique, new_instance, replica_name
from craftai_infer.sessions import SessionStore
from craftai_infer.settings import InferSettings
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc
from craftai_wire.vocabulary import Engine, Reason

log = logging.getLogger("craftai.infer")
Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = infer_pb2.DESCRIPTOR.services_by_name["InferService"].full_name


class InferServicer(infer_pb2_grpc.InferServiceServicer):
    def __init__(self, settings: InferSettings, catalogue: CatalogueClient) -> None:
        self.settings = settings
        self.replica = replica_name(settings.replica)
        self.instance = new_instance()
        self.device = devices.detect(settings.device)
        self.budgets = memory.Budgets.of(
            settings.memory_limit_bytes,
            settings.decode_budget_bytes,
            settings.session_budget_bytes,
            settings.models_budget_bytes,
        )
        self.catalogue = catalogue
        self.routes = RouteLoader(
            catalogue,
            Store(settings.store),
            self.device,
            cpu_threads=settings.cpu_threads,
            gpu_precision=settings.gpu_precision,
            gpu_compile=settings.gpu_compile,
            cpu_spin=settings.cpu_spin,
            bulk_niceness=settings.bulk_niceness,
            fault_injection=settings.fault_injection,
            batching=Batching(settings.batch_window_ms / 1000.0, settings.max_batch),
            models_budget_bytes=self.budgets.models,
            wait_seconds=settings.decode_wait_seconds,
        )
        self.sessions = SessionStore(
            self.budgets.sessions,
            settings.session_idle_seconds,
            max_per_app=settings.max_sessions_per_app,
            replica=self.replica,
        )
        self.routes.pinned = self.sessions.uses  # a route whose embeddings sessions keep stays loaded
        self.context = FeatureContext(settings, self.routes, self.budgets.requests)
        self.matte = MatteFeature(self.context)
        self.segment = SegmentFeature(self.context, self.sessions, self.replica)
        self.cutout = CutoutFeature(self.context, self.matte, self.segment, self.sessions, self.replica)
        self.frames = FramesFeature(self.context, self.matte)

    @handle_errors
    async def GetRuntime(self, request: infer_pb2.GetRuntimeRequest, context: Context) -> infer_pb2.Runtime:
        engines = [str(name) for name in Engine if find_spec(name)]  # each engine is named after its package
        s = self.settings
        return infer_pb2.Runtime(
            device=self.device.preferred,
            gpu_available=self.device.gpu_available,
            gpu_name=self.device.gpu_name,
            loaded=[
                infer_pb2.LoadedRoute(
                    route=r.ref,
                    device=r.device,
                    requests=r.requests,
                    batches=r.batches,
                    resident_bytes=r.resident_bytes,
                )
                for r in self.routes.loaded()
            ],
            limits=infer_pb2.Limits(
                max_message_bytes=s.max_message_bytes,
                max_picture_pixels=s.max_picture_pixels,
                max_picture_side=s.max_picture_side,
                max_points=s.max_points,
                session_budget_bytes=self.budgets.sessions,
                session_idle_seconds=s.session_idle_seconds,
                max_prompts=s.max_prompts,
                max_points_per_side=s.max_points_per_side,
                models_budget_bytes=self.routes.budget_bytes,
            ),
            engines=engines,
            replica=self.replica,
            instance=self.instance,
            measured=[
                infer_pb2.MeasuredRoute(route=ref, device=device, pictures=count, network_ms=ms)
                for ref, device, count, ms in self.routes.measured()
            ],
        )

    @handle_stream_errors
    async def Load(self, request: infer_pb2.LoadRequest, context: Context) -> AsyncIterator[infer_pb2.LoadEvent]:
        if not request.route.feature:
            raise invalid_argument(Reason.UNKNOWN_FEATURE, "name the feature to load", field="route.feature")

        async def load(run: runs.Run) -> infer_pb2.LoadResult:
            resolved = await runs.resolve(self.routes, request.route, request.route.feature)
            started = time.perf_counter()
            loaded = await runs.load(self.routes, resolved, run)
            return infer_pb2.LoadResult(
                loaded=infer_pb2.LoadedRoute(route=loaded.ref, device=loaded.device),
                load_ms=(time.perf_counter() - started) * 1000,
            )

        async for event in runs.stream(infer_pb2.LoadEvent, load):
            yield event

    @handle_stream_errors
    async def Matte(self, request: infer_pb2.MatteRequest, context: Context) -> AsyncIterator[infer_pb2.MatteEvent]:
        async for event in runs.stream(infer_pb2.MatteEvent, lambda run: self.matte.matte(request, run)):
            yield event

    @handle_stream_errors
    async def OpenSession(
        self, request: infer_pb2.OpenSessionRequest, context: Context
    ) -> AsyncIterator[infer_pb2.OpenSessionEvent]:
        app = app_id(context)
        async for event in runs.stream(infer_pb2.OpenSessionEvent, lambda run: self.segment.open(request, app, run)):
            yield event

    @handle_stream_errors
    async def Segment(
        self, request: infer_pb2.SegmentRequest, context: Context
    ) -> AsyncIterator[infer_pb2.SegmentEvent]:
        app = app_id(context)
        async for event in runs.stream(infer_pb2.SegmentEvent, lambda run: self.segment.prompt(request, app, run)):
            yield event

    @handle_stream_errors
    async def SegmentOnce(
        self, request: infer_pb2.SegmentOnceRequest, context: Context
    ) -> AsyncIterator[infer_pb2.SegmentEvent]:
        async for event in runs.stream(infer_pb2.SegmentEvent, lambda run: self.segment.once(request, run)):
            yield event

    @handle_stream_errors
    async def SegmentEverything(
        self, request: infer_pb2.SegmentEverythingRequest, context: Context
    ) -> AsyncIterator[infer_pb2.SegmentEverythingEvent]:
        app = app_id(context)
        work = lambda run: self.segment.everything(request, app, run)  # noqa: E731
        async for event in runs.stream(infer_pb2.SegmentEverythingEvent, work):
            yield event

    @handle_stream_errors
    async def OpenCutout(
        self, request: infer_pb2.OpenCutoutRequest, context: Context
    ) -> AsyncIterator[infer_pb2.CutoutEvent]:
        app = app_id(context)
        async for event in runs.stream(infer_pb2.CutoutEvent, lambda run: self.cutout.open(request, app, run)):
            yield event

    @handle_stream_errors
    async def RefineCutout(
        self, request: infer_pb2.RefineCutoutRequest, context: Context
    ) -> AsyncIterator[infer_pb2.CutoutEvent]:
        app = app_id(context)
        async for event in runs.stream(infer_pb2.CutoutEvent, lambda run: self.cutout.refine(request, app, run)):
            yield event

    @handle_stream_errors
    async def MatteFrames(
        self, requests: AsyncIterator[infer_pb2.MatteFramesRequest], context: Context
    ) -> AsyncIterator[infer_pb2.MatteFramesEvent]:
        async for event in self.frames.frames(aiter(requests)):
            yield event

    @handle_errors
    async def CloseSession(
        self, request: infer_pb2.CloseSessionRequest, context: Context
    ) -> infer_pb2.CloseSessionResponse:
        return self.segment.close(request, app_id(context))

    async def close(self) -> None:
        await self.sessions.stop()
        self.routes.close()
        self.context.close()
        await self.catalogue.close()


def build(settings: InferSettings, *, embedded: bool = False) -> Mount:
    """Embedded (`craftai serve`), the catalogue is on this same server."""
    peers = Peers(settings)
    catalogue = CatalogueClient(settings.catalogue_address, peers=peers)
    servicer = InferServicer(settings, catalogue)
    collectors = Collectors()

    async def start(address: str) -> None:
        if embedded:
            catalogue.address = address
        if settings.replicas_target:
            await check_unique(settings.replicas_target, servicer.replica, servicer.instance, peers)
        collectors.add(
            [
                metrics.InferCollector(
                    servicer.sessions,
                    servicer.routes,
                    servicer.context.budget,
                    servicer.replica,
                    servicer.context.queues,
                )
            ]
        )
        servicer.sessions.start_sweeping()
        log.info(
            "replica %s, device: %s%s",
            servicer.replica,
            servicer.device.preferred,
            f" ({servicer.device.gpu_name})" if servicer.device.gpu_available else "",
        )
        log.info("%s", servicer.budgets)

    async def stop() -> None:
        collectors.close()
        await servicer.close()

    return Mount(
        name=SERVICE_NAME,
        register=lambda server: infer_pb2_grpc.add_InferServiceServicer_to_server(servicer, server),
        start=start,
        stop=stop,
        long_calls={f"/{SERVICE_NAME}/MatteFrames": settings.max_frames_seconds},
    )
