"""The prepare service's gRPC servicer: Setup = resolve the route, then run (or join) its job;
SetupFrom = the same with files the caller brings (received first: brought.py)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from craftai_common.catalogue_client import CatalogueClient, pins_of
from craftai_common.errors import handle_stream_errors, invalid_argument, unavailable
from craftai_common.observability import Collectors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store
from craftai_prepare.brought import Received, Receiver
from craftai_prepare.jobs import JobRegistry
from craftai_prepare.metrics import JobsCollector
from craftai_prepare.reporter import Reporter
from craftai_prepare.settings import PrepareSettings
from craftai_prepare.setup_job import run_setup
from craftai_prepare.sources import Timeouts
from craftai_wire.v1 import catalogue_pb2, common_pb2, prepare_pb2, prepare_pb2_grpc
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.prepare")
Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = prepare_pb2.DESCRIPTOR.services_by_name["PrepareService"].full_name


class PrepareServicer(prepare_pb2_grpc.PrepareServiceServicer):
    def __init__(self, settings: PrepareSettings, catalogue: CatalogueClient) -> None:
        self.settings = settings
        self.store = Store(settings.store)
        self.catalogue = catalogue
        self.jobs = JobRegistry()
        self.timeouts = Timeouts(
            settings.download_connect_timeout,
            settings.download_read_timeout,
            settings.pip_timeout,
            settings.lock_wait_seconds,
        )

    @handle_stream_errors
    async def Setup(self, request: prepare_pb2.SetupRequest, context: Context) -> AsyncIterator[prepare_pb2.SetupEvent]:
        if not request.route.feature:
            raise invalid_argument(
                Reason.UNKNOWN_FEATURE, "name the feature to set up, e.g. image.matte", field="route.feature"
            )
        gpu = request.gpu_available if request.HasField("gpu_available") else None  # unset: the catalogue asks infer
        resolved = await self.catalogue.resolve(request.route, gpu_available=gpu)
        route: common_pb2.RouteRef = resolved.route
        key = f"{route.feature}/{route.recipe}/{route.engine}"
        log.info("setup %s (%s)", key, resolved.reason)

        def work(reporter: Reporter) -> prepare_pb2.SetupResult:
            return self._run_setup(resolved, reporter)

        async for event in self.jobs.join(key, work):
            yield event

    def _run_setup(
        self, resolved: catalogue_pb2.ResolveRouteResponse, reporter: Reporter, brought: Sequence[Received] = ()
    ) -> prepare_pb2.SetupResult:
        """The setup job with this service's store, timeouts and limits (on a job's thread)."""
        return run_setup(
            self.store,
            resolved,
            reporter,
            self.timeouts,
            self.settings.lock_wait_seconds,
            self.jobs.stopping,
            brought,
            memory_limit_bytes=self.settings.memory_limit_bytes,
        )

    @handle_stream_errors
    async def SetupFrom(
        self, requests: AsyncIterator[prepare_pb2.SetupUpload], context: Context
    ) -> AsyncIterator[prepare_pb2.SetupEvent]:
        first = await anext(aiter(requests), None)
        if first is None or not first.HasField("route") or not first.route.route.feature:
            raise invalid_argument(
                Reason.UNKNOWN_FEATURE,
                "the first message names the route to set up (its feature at least, e.g. image.matte)",
                field="route",
            )
        asked = first.route
        gpu = asked.gpu_available if asked.HasField("gpu_available") else None
        resolved = await self.catalogue.resolve(asked.route, gpu_available=gpu)
        route: common_pb2.RouteRef = resolved.route
        key = f"{route.feature}/{route.recipe}/{route.engine}"
        log.info("setup %s from files brought by the caller (%s)", key, resolved.reason)
        receiver = Receiver(self.store, pins_of(resolved.recipe), key)
        try:
            async for event in self._receive(requests, receiver):
                yield event
            brought = receiver.received

            def work(reporter: Reporter) -> prepare_pb2.SetupResult:
                if not receiver.claim():
                    raise unavailable(Reason.SHUTTING_DOWN, "the caller went away before its files were placed")
                try:
                    return self._run_setup(resolved, reporter, brought)
                finally:
                    receiver.discard()  # the job's once claimed: it goes on when the caller goes away

            # A job of its own (the files are this call's), serialised with any other job of the
            # route by the route's lock.
            async for event in self.jobs.join(f"{key} (brought {uuid.uuid4().hex[:8]})", work):
                yield event
        finally:
            if receiver.claim():  # the job never took the files: this call removes them
                receiver.discard()

    async def _receive(
        self, requests: AsyncIterator[prepare_pb2.SetupUpload], receiver: Receiver
    ) -> AsyncIterator[prepare_pb2.SetupEvent]:
        """The brought files, each checked while written, with "receive" progress."""
        shown_at = 0.0
        name = ""
        async for message in requests:
            part = message.WhichOneof("part")
            if part == "file":
                await asyncio.to_thread(receiver.start, message.file)
                name = message.file.name
                yield _receiving(receiver, f"receiving {name}")
            elif part == "chunk":
                await asyncio.to_thread(receiver.chunk, message.chunk)
                if time.monotonic() - shown_at >= RECEIVE_PROGRESS_SECONDS:
                    shown_at = time.monotonic()
                    yield _receiving(receiver, f"receiving {name}")
            else:
                raise invalid_argument(Reason.FILE_MISMATCH, "the route is named once, first", field="route")
        brought = await asyncio.to_thread(receiver.finish)
        yield _receiving(receiver, f"received {len(brought)} file(s), every byte checked")

    async def close(self) -> None:
        await self.jobs.drain()
        await self.catalogue.close()


RECEIVE_PROGRESS_SECONDS = 0.1  # "receive" progress at most ten times a second


def _receiving(receiver: Receiver, message: str) -> prepare_pb2.SetupEvent:
    return prepare_pb2.SetupEvent(
        progress=common_pb2.Progress(
            stage="receive", done=receiver.bytes_received, total=receiver.expected, unit="bytes", message=message
        )
    )


def build(settings: PrepareSettings, *, embedded: bool = False) -> Mount:
    """Embedded (`craftai serve`), the catalogue is on this same server."""
    catalogue = CatalogueClient(settings.catalogue_address, peers=Peers(settings))
    servicer = PrepareServicer(settings, catalogue)
    collectors = Collectors()

    async def start(address: str) -> None:
        if embedded:
            catalogue.address = address
        Store(settings.store).ensure()
        collectors.add([JobsCollector(servicer.jobs)])

    async def stop() -> None:
        collectors.close()
        await servicer.close()

    return Mount(
        name=SERVICE_NAME,
        register=lambda server: prepare_pb2_grpc.add_PrepareServiceServicer_to_server(servicer, server),
        start=start,
        stop=stop,
        drain=servicer.jobs.stop_waiting,
        long_calls={
            f"/{SERVICE_NAME}/Setup": settings.max_setup_seconds,
            f"/{SERVICE_NAME}/SetupFrom": settings.max_setup_seconds,
        },
    )
