"""The infer service's own Prometheus metrics (docs/OBSERVABILITY.md): the replica's name, sessions,
loaded routes, model requests by operation, model queues, the route-resolution cache (resolutions
by where they were answered) and GPU memory, read from the live objects at each scrape (nothing to
keep in step). Each replica serves its own: summed by replica (or by the scraped pod), they show how
the work was spread."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from craftai_common.observability import app_label
from craftai_infer.loader import RouteLoader
from craftai_infer.memory import DecodeBudget
from craftai_infer.scheduling import WorkQueue
from craftai_infer.sessions import SessionStore

log = logging.getLogger("craftai.infer.metrics")


class InferCollector(Collector):
    """Reads the session store and the loaded routes at each scrape."""

    def __init__(
        self,
        sessions: SessionStore,
        routes: RouteLoader,
        budget: DecodeBudget | None = None,
        replica: str = "",
        pools: Sequence[WorkQueue[Any, Any]] = (),
    ) -> None:
        self.sessions = sessions
        self.routes = routes
        self.budget = budget
        self.replica = replica
        self.pools = pools  # the CPU pools' queues (features.context)

    def collect(self) -> Iterator[Metric]:
        s = self.sessions
        info = GaugeMetricFamily(
            "craftai_infer_replica", "This replica's name (Runtime.replica), 1", labels=["replica", "device"]
        )
        info.add_metric([self.replica, self.routes.device.preferred], 1)
        yield info
        open_sessions = GaugeMetricFamily(
            "craftai_infer_sessions", "Open image.segment sessions, by app", labels=["app"]
        )
        by_label: dict[str, int] = {}
        for app, count in s.per_app().items():  # app ids capped as every app label is (the rest: "other")
            label = app_label(app)
            by_label[label] = by_label.get(label, 0) + count
        for label, count in sorted(by_label.items()):
            open_sessions.add_metric([label], count)
        yield open_sessions
        yield GaugeMetricFamily(
            "craftai_infer_session_bytes",
            "Bytes kept by sessions: embeddings, and cutouts' pictures, mattes and colours",
            value=s.bytes_used,
        )
        yield GaugeMetricFamily(
            "craftai_infer_session_budget_bytes", "CRAFTAI_SESSION_BUDGET_BYTES", value=s.budget_bytes
        )
        yield CounterMetricFamily(
            "craftai_infer_sessions_opened",
            "Sessions opened on this replica (each ran the encoder once)",
            value=s.opened_total,
        )
        ended = CounterMetricFamily(
            "craftai_infer_sessions_ended", "Sessions forgotten by the server, by why", labels=["why"]
        )
        ended.add_metric(["evicted"], s.evicted_total)
        ended.add_metric(["expired"], s.expired_total)
        yield ended
        lookups = CounterMetricFamily(
            "craftai_infer_session_lookups", "Prompts by whether their session was found", labels=["result"]
        )
        lookups.add_metric(["hit"], s.hits_total)
        lookups.add_metric(["miss"], s.misses_total)
        yield lookups

        loaded = GaugeMetricFamily(
            "craftai_infer_loaded_routes", "Routes loaded (1 each)", labels=["feature", "recipe", "engine", "device"]
        )
        operations = CounterMetricFamily(
            "craftai_infer_model_requests",
            "Requests to a loaded route's model, by operation (matte, encode, decode, grid)",
            labels=["feature", "recipe", "engine", "operation"],
        )
        queued = GaugeMetricFamily(
            "craftai_infer_model_queue_depth",
            "Requests waiting for a route's model (held for a batch or queued on its worker)",
            labels=["feature", "recipe", "engine"],
        )
        for route in self.routes.loaded():
            ref = route.ref
            loaded.add_metric([ref.feature, ref.recipe, ref.engine, route.device], 1)
            queued.add_metric([ref.feature, ref.recipe, ref.engine], route.queued)
            for operation, count in sorted(route.operations.items()):
                operations.add_metric([ref.feature, ref.recipe, ref.engine, operation], count)
        yield loaded
        yield operations
        yield queued
        resident = GaugeMetricFamily(
            "craftai_infer_model_bytes",
            "What a loaded route holds (its load's growth of the process, at least its files)",
            labels=["feature", "recipe", "engine"],
        )
        for route in self.routes.loaded():
            resident.add_metric([route.ref.feature, route.ref.recipe, route.ref.engine], route.resident_bytes)
        yield resident
        yield GaugeMetricFamily(
            "craftai_infer_models_budget_bytes", "CRAFTAI_MODELS_BUDGET_BYTES (0: none)", value=self.routes.budget_bytes
        )
        yield CounterMetricFamily(
            "craftai_infer_models_unloaded",
            "Idle routes unloaded to keep the loaded models within their budget",
            value=self.routes.unloaded_total,
        )
        waiting = GaugeMetricFamily(
            "craftai_infer_queue_depth",
            "Jobs waiting for a worker, by queue (a route's model, or a CPU pool), class and app",
            labels=["queue", "class", "app"],
        )
        for queue in [route.queue for route in self.routes.loaded()] + list(self.pools):
            by_class: dict[tuple[str, str], int] = {}
            for w in queue.waiting():
                key = (w.work_class.label, app_label(w.tenant))
                by_class[key] = by_class.get(key, 0) + w.jobs
            for (work_class, app), jobs in sorted(by_class.items()):
                waiting.add_metric([queue.name, work_class, app], jobs)
        yield waiting
        resolutions = CounterMetricFamily(
            "craftai_infer_route_resolutions",
            "Route resolutions by where they were answered: cache (hit) or catalogue (miss)",
            labels=["source"],
        )
        for source, count in self.routes.resolutions.items():
            resolutions.add_metric([source], count)
        yield resolutions
        if self.budget is not None:
            b = self.budget
            yield GaugeMetricFamily(
                "craftai_infer_decode_bytes",
                "Bytes of decoded pictures held (CRAFTAI_DECODE_BUDGET_BYTES)",
                value=b.used,
            )
            yield GaugeMetricFamily(
                "craftai_infer_decode_waiting", "Requests waiting for the decode budget", value=b.waiting
            )
            yield CounterMetricFamily(
                "craftai_infer_decode_refused", "Requests refused MEMORY_BUDGET after their wait", value=b.refused_total
            )
            yield CounterMetricFamily(
                "craftai_infer_memory_trims",
                "Times the heaps' free memory was given back to the system, the decode budget having stayed idle",
                value=b.trims_total,
            )
        yield from _gpu_memory(self.routes.device.gpu_available)


def _gpu_memory(gpu_available: bool) -> Iterator[Metric]:
    """GPU memory (bytes) as torch sees it, only where a GPU answers and torch is already in use."""
    torch = sys.modules.get("torch")
    if not gpu_available or torch is None:
        return
    try:
        free, total = torch.cuda.mem_get_info()
        allocated = torch.cuda.memory_allocated()
        reserved = torch.cuda.memory_reserved()
    except Exception as exc:
        log.debug("GPU memory not read: %s", exc)
        return
    memory = GaugeMetricFamily("craftai_infer_gpu_memory_bytes", "GPU memory of device 0", labels=["kind"])
    for kind, value in (("total", total), ("free", free), ("allocated", allocated), ("reserved", reserved)):
        memory.add_metric([kind], value)
    yield memory
