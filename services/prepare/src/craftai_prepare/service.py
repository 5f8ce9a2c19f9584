"""The prepare service's gRPC servicer: Setup = resolve the route, then run (or join) its job."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from craftai_common.catalogue_client import CatalogueClient, pins_of
from craftai_common.errors import handle_stream_errors, invalid_argument
from craftai_common.observability import Collectors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store, prepared_key
from craftai_prepare.conversion import ensure_prepared
from craftai_prepare.downloads import ensure_file, forget_archives
from craftai_prepare.jobs import JobRegistry
from craftai_prepare.locks import route_lock
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
) -> prepare_pb2.SetupResult:
    """The job: under the store's cross-process lock for this route, fetch and check every file."""
    store.ensure()
    route = resolved.route
    key = f"{route.feature}/{route.recipe}/{route.engine}"
    with route_lock(store, key, reporter, lock_wait, stopping):
        sources = [sources_of(spec) for spec in resolved.recipe.files]
        outcomes = [
            ensure_file(store, pin, own, reporter, timeouts, stopping)
            for pin, own in zip(pins_of(resolved.recipe), sources, strict=True)
        ]
        forget_archives(store, [source for own in sources for source in own])  # every file is in place
        prepared_now = ensure_prepared(store, resolved, reporter) if resolved.chosen.needs_preparation else None
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

    async def close(self) -> None:
        await self.jobs.drain()
        await self.catalogue.close()


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
        long_calls={f"/{SERVICE_NAME}/Setup": settings.max_setup_seconds},
    )
