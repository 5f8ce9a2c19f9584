"""The prepare service's gRPC servicer: Setup = resolve the route, then run (or join) its job;
SetupFrom = the same with files the caller brings (received first: brought.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from craftai_common.catalogue_client import CatalogueClient, pins_of
from craftai_common.errors import ServiceError, handle_stream_errors, invalid_argument, unavailable
from craftai_common.observability import Collectors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store, prepared_key
from craftai_prepare import ownership
from craftai_prepare.brought import Received, Receiver
from craftai_prepare.conversion import ensure_prepared
from craftai_prepare.downloads import FetchOutcome, ensure_file, forget_archives, place
from craftai_prepare.jobs import JobRegistry
from craftai_prepare.locks import route_lock
from craftai_prepare.offline import from_command, with_offline_help
from craftai_prepare.reporter import Reporter
from craftai_prepare.settings import PrepareSettings
from craftai_prepare.sources import Timeouts, sources_of
from craftai_wire.v1 import catalogue_pb2, common_pb2, prepare_pb2, prepare_pb2_grpc
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.prepare")
Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = prepare_pb2.DESCRIPTOR.services_by_name["PrepareService"].full_name


def run_setup(  # noqa: PLR0917 - the job's inputs, passed from one place
    store: Store,
    resolved: catalogue_pb2.ResolveRouteResponse,
    reporter: Reporter,
    timeouts: Timeouts,
    lock_wait: float,
    stopping: threading.Event | None = None,
    brought: Sequence[Received] = (),
) -> prepare_pb2.SetupResult:
    """The job: under the store's cross-process lock for this route, place the files the caller
    brought, then fetch and check every other file, then prepare."""
    store.ensure()
    route = resolved.route
    key = f"{route.feature}/{route.recipe}/{route.engine}"
    try:
        with route_lock(store, key, reporter, lock_wait, stopping):
            outcomes = _files(store, resolved, reporter, timeouts, stopping, brought)
            prepared_now = ensure_prepared(store, resolved, reporter) if resolved.chosen.needs_preparation else None
    except PermissionError as exc:  # a file or folder placed by hand with another owner or mode
        where = Path(exc.filename) if exc.filename else store.root
        raise ownership.refusal(store, where, "read or write", bring=from_command(route)) from exc
    return prepare_pb2.SetupResult(
        route=route,
        files=[
            prepare_pb2.FileOutcome(
                folder=o.pin.folder,
                name=o.pin.name,
                size=o.pin.size,
                sha256=o.pin.sha256,
                downloaded=o.downloaded,
                source=o.source,
            )
            for o in outcomes
        ],
        revision=prepared_key(resolved.chosen.revision, pins_of(resolved.recipe))
        if resolved.chosen.needs_preparation
        else "",
        prepared_now=prepared_now is not None,
        already_done=prepared_now is None and not any(o.downloaded for o in outcomes),
    )


def _files(  # noqa: PLR0917 - run_setup's inputs
    store: Store,
    resolved: catalogue_pb2.ResolveRouteResponse,
    reporter: Reporter,
    timeouts: Timeouts,
    stopping: threading.Event | None,
    brought: Sequence[Received],
) -> list[FetchOutcome]:
    """Every file of the route in place: those brought placed, the others fetched or checked. A
    file no source could give fails naming every file still lacking and how to bring them."""
    placed = {r.pin: place(store, r.pin, r.path, r.origin) for r in brought}
    pins = pins_of(resolved.recipe)
    sources = [sources_of(spec) for spec in resolved.recipe.files]
    outcomes = []
    for index, (pin, own) in enumerate(zip(pins, sources, strict=True)):
        if pin in placed:
            outcomes.append(placed[pin])
            continue
        try:
            outcomes.append(ensure_file(store, pin, own, reporter, timeouts, stopping))
        except ServiceError as error:
            if error.reason == Reason.SOURCES_FAILED:
                raise with_offline_help(error, store, resolved, pins[index:]) from error
            raise
    forget_archives(store, [source for own in sources for source in own])  # every file is in place
    return outcomes


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
            return run_setup(
                self.store, resolved, reporter, self.timeouts, self.settings.lock_wait_seconds, self.jobs.stopping
            )

        async for event in self.jobs.join(key, work):
            yield event

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
                    return run_setup(
                        self.store,
                        resolved,
                        reporter,
                        self.timeouts,
                        self.settings.lock_wait_seconds,
                        self.jobs.stopping,
                        brought,
                    )
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


class JobsCollector(Collector):
    """Preparation jobs, read at each scrape (docs/OBSERVABILITY.md)."""

    def __init__(self, jobs: JobRegistry) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "craftai_prepare_jobs_running", "Preparation jobs running", value=len(self.jobs.running())
        )
        yield GaugeMetricFamily(
            "craftai_prepare_job_listeners", "Callers waiting on a job's progress", value=self.jobs.listeners()
        )
        finished = CounterMetricFamily("craftai_prepare_jobs", "Preparation jobs finished", labels=["outcome"])
        for outcome, count in sorted(self.jobs.finished.items()):
            finished.add_metric([outcome], count)
        yield finished
        yield CounterMetricFamily(
            "craftai_prepare_jobs_joined", "Callers that joined a job already running", value=self.jobs.joined_total
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
