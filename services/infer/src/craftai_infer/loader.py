"""Loading routes: resolve through the catalogue, check every file's hash, build once, keep warm.

The infer service never downloads or converts: a route whose files are missing or differ from
their pins is refused with FAILED_PRECONDITION naming the command that sets it up. A failure on
the GPU that is not a cancel rebuilds the model on the CPU from the same files, re-runs the
request there (with a notice), and keeps the model on the CPU once that worked; tried once.

Loaded models share one budget (CRAFTAI_MODELS_BUDGET_BYTES): a server that has answered every
recipe once would otherwise hold every network for good. A route costs what its load added to the
process's resident memory (at least its files' bytes); before a load the least recently used idle
routes are unloaded until the new one's files fit. A route is idle when no request holds it (a
request holds its route from its load to its end: `get`, `LoadedRoute.release`), nothing waits for
or runs on its workers, and no kept session was made by it. Where the idle routes cannot make room
the load waits for one, then is refused (MEMORY_BUDGET, retryable); a route whose files alone are
larger than the budget is refused at once (OVER_BUDGET). Loads run one at a time, so that each
one's cost is measured alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from prometheus_client import Histogram

from craftai_common.catalogue_client import CatalogueClient, pins_of, setup_command
from craftai_common.errors import ServiceError, failed_precondition, resource_exhausted
from craftai_common.store import FilePin, Store, check_prepared
from craftai_infer import faults, memory
from craftai_infer.device import DeviceInfo
from craftai_infer.routes import Factory, ModelRefusedError, Operation, Precision, Route, RouteFiles, Step
from craftai_infer.routes.registry import factories
from craftai_infer.scheduling import CpuPool, WorkClass, Workers, WorkQueue, roles, running_class, submitted
from craftai_wire.v1 import catalogue_pb2, common_pb2
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.infer.loader")

MODEL_CALL = Histogram(
    "craftai_infer_model_call_seconds",
    "How long a model's calls ran (a batch is one call), by route, operation and the batch's class",
    ["queue", "operation", "class"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.25, 1, 5),
)

RouteKey = tuple[str, str, str]
RouteT = TypeVar("RouteT", bound=Route)
I = TypeVar("I")  # noqa: E741 - an operation's request type
O = TypeVar("O")  # noqa: E741 - its result type
RESOLVE_TTL = 60.0
IDLE_POLL_SECONDS = 0.05  # a load that waits for a route to go idle looks again this often
MEASURES_KEPT = 32  # a route's last network times kept for its median (Runtime.measured)


@dataclass
class Notices:
    """Notices raised while answering one request, forwarded into its stream."""

    items: list[common_pb2.Notice]

    def add(self, code: str, message: str) -> None:
        self.items.append(common_pb2.Notice(code=code, message=message))


@dataclass(frozen=True)
class Batching:
    """Dynamic batching: requests arriving within `window_s` run as one model call (up to `max_batch`)."""

    window_s: float = 0.003
    max_batch: int = 8


FELL_BACK_TO_CPU = "FELL_BACK_TO_CPU"
Answered = tuple[Any, str]  # a result, and the fallback notice of the call that made it ("" when none)


class LoadedRoute(Generic[RouteT]):
    """A built route, its worker threads (model work never runs on the event loop), its queue and files.

    Invariants: every call of the route runs on one of its `Workers` (craftai_infer.scheduling):
    one thread, or `concurrent_runs` threads where the route says its calls may overlap; on the CPU
    as many more that take interactive work only, and the others then take bulk work alone at a
    lower priority (CRAFTAI_BULK_NICENESS); the queue in front of them runs interactive work first
    and the tenants in turns. `route` is replaced at most once, by the CPU rebuild after a GPU
    failure, on a worker, inside the call that failed.
    """

    def __init__(
        self,
        ref: common_pb2.RouteRef,
        route: RouteT,
        factory: Factory,
        files: RouteFiles,
        *,
        batching: Batching | None = None,
        fault: faults.Fault | None = None,
    ) -> None:
        self.ref = ref
        self.route = route
        self._factory = factory
        self._files = files
        self._fell_back = False
        self._fault = fault
        self._batching = batching or Batching()
        capabilities = route.capabilities
        self.queue: WorkQueue[tuple[Operation[Any, Any, Any], Any], Answered] = WorkQueue(
            f"{ref.recipe}/{ref.engine}",
            max_batch=self._batching.max_batch,
            window_s=self._batching.window_s,
            batch_limit=self._batch_limit,
        )
        on_cpu = route.device == "cpu" and capabilities.interactive_lane
        self._workers = Workers(
            self.queue,
            self._execute,
            roles=roles(
                capabilities.concurrent_runs,
                lanes=capabilities.concurrent_runs if on_cpu else 0,
                bulk_niceness=files.bulk_niceness if on_cpu else 0,
            ),
            name=f"model-{ref.recipe}-{ref.engine}",
        )
        self.requests = 0
        self.operations: Counter[str] = Counter()  # requests by operation (MATTE, ENCODE, ...): the metrics
        self.resident_bytes = 0  # what loading it added to the process (at least its files): RouteLoader
        self.holders = 0  # requests between their load and their end (RouteLoader.get, `release`)
        self.last_used = time.monotonic()
        self.closed = False

    def hold(self) -> None:
        """A request uses the route until it calls `release`: it is not unloaded meanwhile."""
        self.holders += 1
        self.last_used = time.monotonic()

    def release(self) -> None:
        self.holders -= 1
        self.last_used = time.monotonic()

    @property
    def idle(self) -> bool:
        """No request holds it, and nothing waits for or runs on its workers."""
        return self.holders == 0 and self.queue.depth == 0 and self.queue.busy == 0

    @property
    def device(self) -> str:
        return self.route.device

    async def submit(
        self,
        operation: Operation[RouteT, I, O],
        request: I,
        notices: Notices,
        key: Hashable = None,
        *,
        work_class: WorkClass | None = None,
    ) -> O:
        """One request to the route, in its request's class and tenant unless `work_class` says:
        batched with like requests (the same `key`) waiting at the same time when the route batches
        this operation, else a call of its own."""
        self.requests += 1
        self.operations[operation.name] += 1
        batched = operation in self.route.capabilities.batched and self._batching.max_batch > 1
        result, notice = await submitted(
            self.queue, (operation, request), batch_key=(operation, key) if batched else None, work_class=work_class
        )
        if notice:
            notices.add(FELL_BACK_TO_CPU, notice)
        return cast(O, result)

    def _batch_limit(self, batch_key: Hashable) -> int:
        """The route's own bound on a call of this operation (Capabilities.max_batch), read when a
        worker takes a batch: the CPU route that replaces a failed GPU route has its own."""
        operation, _ = cast(tuple[Operation[Any, Any, Any], Hashable], batch_key)  # as `submit` makes it
        return self.route.capabilities.max_batch.get(operation, self._batching.max_batch)

    def _execute(self, payloads: list[tuple[Operation[Any, Any, Any], Any]]) -> list[Answered]:
        """A batch the queue gave a worker: one operation's requests (a batch never mixes them)."""
        operation = payloads[0][0]
        work_class = running_class()
        label = (WorkClass.BULK if work_class is None else work_class).label  # INTERACTIVE is 0: falsy
        started = time.perf_counter()
        try:
            return self._call(operation, [request for _, request in payloads])
        finally:
            MODEL_CALL.labels(self.queue.name, operation.name, label).observe(time.perf_counter() - started)

    def _call(self, operation: Operation[Any, Any, Any], requests: list[Any]) -> list[Answered]:
        """On the model's worker: one call of the route. A failure on the GPU that is not an answer
        (ServiceError) rebuilds the route on the CPU from the same files, runs the call again there
        and keeps the CPU route; tried once."""
        route = self.route
        try:
            if self._fault is not None:
                self._fault.before_call(route)
            return [(result, "") for result in operation.call(route, requests)]
        except ServiceError:
            raise
        except Exception as exc:
            if route.device == "cpu" or self._fell_back:
                raise
            self._fell_back = True
            log.warning("%s failed on %s (%s); rebuilding on the CPU", self.ref.recipe, route.device, exc)
            cpu_route = self._factory(self._files, "cpu")
            results = operation.call(cpu_route, requests)
            self.route = cast(RouteT, cpu_route)
            notice = f"the GPU failed ({type(exc).__name__}: {exc}); answered on the CPU, which this model keeps using"
            return [(result, notice) for result in results]

    @property
    def queued(self) -> int:
        """Requests waiting for the model (not yet taken by a worker)."""
        return self.queue.depth

    @property
    def batches(self) -> int:
        """Model calls made (fewer than the requests when batching happened)."""
        return self.queue.batches

    def close(self) -> None:
        self.closed = True
        self._workers.close()

    def join(self, timeout: float) -> None:
        """Wait for the closed route's threads to end (their batches hold its model)."""
        self._workers.join(timeout)


class RouteLoader:
    """Owns the loaded routes of this process."""

    def __init__(
        self,
        catalogue: CatalogueClient,
        store: Store,
        device: DeviceInfo,
        *,
        cpu_threads: int,
        gpu_precision: Precision = "auto",
        gpu_compile: bool = False,
        cpu_spin: bool = False,
        bulk_niceness: int = 0,
        fault_injection: str = "",
        batching: Batching | None = None,
        models_budget_bytes: int = 0,
        wait_seconds: float = 30.0,
    ) -> None:
        self.catalogue = catalogue
        self.store = store
        self.device = device
        self.cpu_threads = cpu_threads
        self.gpu_precision: Precision = gpu_precision
        self.gpu_compile = gpu_compile
        self.cpu_spin = cpu_spin
        self.bulk_niceness = bulk_niceness
        self.fault_injection = fault_injection
        self.batching = batching or Batching()
        self._resolved: dict[RouteKey, tuple[float, catalogue_pb2.ResolveRouteResponse]] = {}
        self._loaded: dict[RouteKey, LoadedRoute[Any]] = {}
        self._loading: dict[RouteKey, asyncio.Future[LoadedRoute[Any]]] = {}
        self._factories = factories()
        self.resolutions = {"cache": 0, "catalogue": 0}  # where route resolutions were answered
        self.budget_bytes = models_budget_bytes  # 0: no budget
        self.wait_seconds = wait_seconds  # how long a load waits for an idle route to unload
        self.pinned: Callable[[LoadedRoute[Any]], bool] = lambda _route: False  # e.g. kept sessions use it
        self.unloaded_total = 0
        # the routes' per-picture host steps (RouteFiles.host): a batch of frames resized on every core
        self.host = CpuPool(max(2, os.cpu_count() or 2), "route-host", bulk_niceness=bulk_niceness)
        self._one_load = asyncio.Lock()
        # (feature, recipe, engine, device) -> pictures measured and their last network times (ms)
        self._measures: dict[tuple[str, str, str, str], tuple[int, deque[float]]] = {}

    def measure(self, ref: common_pb2.RouteRef, device: str, network_ms: float) -> None:
        """A picture's network time on the route: `measured` reports their median."""
        key = (ref.feature, ref.recipe, ref.engine, device)
        count, times = self._measures.get(key) or (0, deque(maxlen=MEASURES_KEPT))
        times.append(network_ms)
        self._measures[key] = (count + 1, times)

    def measured(self) -> list[tuple[common_pb2.RouteRef, str, int, float]]:
        """Each route measured here: its ref, the device, the pictures measured and their median time."""
        return [
            (common_pb2.RouteRef(feature=f, recipe=r, engine=e), device, count, statistics.median(times))
            for (f, r, e, device), (count, times) in sorted(self._measures.items())
        ]

    @property
    def resident_bytes(self) -> int:
        """What the loaded routes hold, together."""
        return sum(loaded.resident_bytes for loaded in self._loaded.values())

    def loaded(self) -> list[LoadedRoute[Any]]:
        return list(self._loaded.values())

    async def resolve(self, ref: common_pb2.RouteRef) -> catalogue_pb2.ResolveRouteResponse:
        key = (ref.feature, ref.recipe, ref.engine)
        cached = self._resolved.get(key)
        if cached is not None and time.monotonic() - cached[0] < RESOLVE_TTL:
            self.resolutions["cache"] += 1
            return cached[1]
        resolved = await self.catalogue.resolve(ref, gpu_available=self.device.gpu_available)
        self.resolutions["catalogue"] += 1
        self._resolved[key] = (time.monotonic(), resolved)
        return resolved

    def is_loaded(self, resolved: catalogue_pb2.ResolveRouteResponse) -> bool:
        r = resolved.route
        return (r.feature, r.recipe, r.engine) in self._loaded

    async def get(self, resolved: catalogue_pb2.ResolveRouteResponse, step: Step | None = None) -> LoadedRoute[Any]:
        """The loaded route, held for the caller (who calls its `release` when done), loading it
        first: once, however many requests ask at the same time, within the models' budget.

        `step` hears the load's warm-up steps (called from the loading thread)."""
        r = resolved.route
        key = (r.feature, r.recipe, r.engine)
        while True:
            loaded = self._loaded.get(key)
            if loaded is not None:
                loaded.hold()
                return loaded
            pending = self._loading.get(key)
            if pending is None:
                pending = asyncio.get_running_loop().create_future()
                self._loading[key] = pending
                try:
                    loaded = await self._load_within_budget(key, resolved, step or (lambda _message: None))
                    loaded.hold()
                    pending.set_result(loaded)
                except BaseException as exc:
                    pending.set_exception(exc)
                    pending.exception()  # retrieved: joiners re-raise it; no "never retrieved" warning
                    raise
                finally:
                    del self._loading[key]
                return loaded
            loaded = await asyncio.shield(pending)
            if not loaded.closed:  # else unloaded before this joiner woke: load it again
                loaded.hold()
                return loaded

    async def _load_within_budget(
        self, key: RouteKey, resolved: catalogue_pb2.ResolveRouteResponse, step: Step
    ) -> LoadedRoute[Any]:
        """Load one route at a time: idle routes unloaded first until its files fit, its cost
        measured, and any excess that measure shows unloaded after."""
        async with self._one_load:
            r = resolved.route
            needed = self._files_bytes(resolved)
            unloaded = await self._make_room(needed, f"{r.recipe} ({r.engine})")
            loaded = await asyncio.to_thread(self._load, resolved, step, needed, unloaded)
            del unloaded
            self._loaded[key] = loaded
            more = self._unload_idle(0, keep=loaded)
            if more:
                await asyncio.to_thread(_give_back, more)
            return loaded

    def _files_bytes(self, resolved: catalogue_pb2.ResolveRouteResponse) -> int:
        """The bytes of the files this route loads: the least a loaded route holds. The resolved
        recipe lists only the files of the route's engine (the catalogue's ResolveRoute), so they
        are summed as they come."""
        return sum(f.size for f in resolved.recipe.files)

    async def _make_room(self, needed: int, what: str) -> list[LoadedRoute[Any]]:
        """Unload idle routes, least recently used first, until `needed` more bytes fit the budget;
        wait for routes in use to go idle, up to `wait_seconds`. The routes unloaded are returned
        (their memory is given back by the loading thread, before it measures)."""
        if not self.budget_bytes:
            return []
        if needed > self.budget_bytes:
            raise resource_exhausted(
                Reason.OVER_BUDGET,
                f"the model {what} needs at least {memory.mib(needed)} loaded (its files), more than the "
                f"{memory.mib(self.budget_bytes)} this server gives loaded models (CRAFTAI_MODELS_BUDGET_BYTES), "
                "so it cannot be loaded here; raise that budget or choose a smaller recipe",
                needed_bytes=str(needed),
                budget_bytes=str(self.budget_bytes),
            )
        unloaded: list[LoadedRoute[Any]] = []
        deadline = time.monotonic() + self.wait_seconds
        while True:
            unloaded += self._unload_idle(needed)
            if self.resident_bytes + needed <= self.budget_bytes:
                return unloaded
            if time.monotonic() >= deadline:
                busy = ", ".join(f"{lr.ref.recipe} ({memory.mib(lr.resident_bytes)})" for lr in self._loaded.values())
                raise resource_exhausted(
                    Reason.MEMORY_BUDGET,
                    f"the model {what} needs ~{memory.mib(needed)} loaded and the models in use hold "
                    f"{memory.mib(self.resident_bytes)} of the {memory.mib(self.budget_bytes)} budget "
                    f"(CRAFTAI_MODELS_BUDGET_BYTES): {busy}; retry when they are idle",
                    retry_after=1.0,
                    needed_bytes=str(needed),
                    budget_bytes=str(self.budget_bytes),
                )
            await asyncio.sleep(IDLE_POLL_SECONDS)

    def _unload_idle(self, needed: int, keep: LoadedRoute[Any] | None = None) -> list[LoadedRoute[Any]]:
        """Unload idle routes (not pinned, not `keep`), least recently used first, while the loaded
        routes and `needed` more are over the budget."""
        unloaded: list[LoadedRoute[Any]] = []
        while self.budget_bytes and self.resident_bytes + needed > self.budget_bytes:
            idle = [
                (loaded.last_used, key)
                for key, loaded in self._loaded.items()
                if loaded is not keep and loaded.idle and not self.pinned(loaded)
            ]
            if not idle:
                break
            _, key = min(idle)
            loaded = self._loaded.pop(key)
            loaded.close()
            self.unloaded_total += 1
            log.info(
                "unloaded %s/%s (%s, idle): the loaded models were over CRAFTAI_MODELS_BUDGET_BYTES (%s)",
                loaded.ref.recipe,
                loaded.ref.engine,
                memory.mib(loaded.resident_bytes),
                memory.mib(self.budget_bytes),
            )
            unloaded.append(loaded)
        return unloaded

    def _load(
        self, resolved: catalogue_pb2.ResolveRouteResponse, step: Step, needed: int, unloaded: list[LoadedRoute[Any]]
    ) -> LoadedRoute[Any]:
        """On a thread: the routes unloaded for it given back, then the route built, warmed up and
        its cost measured (what the process's resident memory grew by, at least `needed`)."""
        _give_back(unloaded)  # it empties the list: no reference to their models left here
        before = memory.resident()
        loaded = self._build(resolved, step)
        loaded.resident_bytes = max(needed, memory.resident() - before)
        return loaded

    def _build(self, resolved: catalogue_pb2.ResolveRouteResponse, step: Step) -> LoadedRoute[Any]:
        ref = resolved.route
        factory = self._factories.get((ref.recipe, ref.engine))
        if factory is None:
            raise failed_precondition(
                Reason.ENGINE_NOT_INSTALLED,
                f"this infer service cannot run recipe {ref.recipe} with engine {ref.engine}",
                recipe=ref.recipe,
                engine=ref.engine,
            )
        files = self._verified_files(resolved)
        started = time.perf_counter()
        fault = faults.Fault(self.fault_injection) if self.fault_injection else None
        try:
            if fault is not None:
                route = fault.build(lambda device: factory(files, device))
            else:
                route = factory(files, self.device.preferred)
        except ModelRefusedError as exc:
            raise failed_precondition(
                Reason.MODEL_REFUSED,
                f"refused the files of {ref.recipe} ({ref.engine}): {exc}",
                recipe=ref.recipe,
                engine=ref.engine,
            ) from exc
        route.warm_up(step)  # e.g. CUDA graphs captured now, not on the first request
        log.info(
            "loaded %s/%s on %s in %.0f ms",
            ref.recipe,
            ref.engine,
            route.device,
            (time.perf_counter() - started) * 1000,
        )
        return LoadedRoute(ref, route, factory, files, batching=self.batching, fault=fault)

    def _verified_files(self, resolved: catalogue_pb2.ResolveRouteResponse) -> RouteFiles:
        """The files the route loads, each checked: a prepared folder against its manifest (every
        output hashed), or the downloaded files against their pins. Never converts anything."""
        ref = resolved.route
        command = setup_command(ref, several_engines=len(resolved.recipe.routes) > 1)
        pins = pins_of(resolved.recipe)

        def not_set_up(problem: str, **metadata: str) -> ServiceError:
            return failed_precondition(
                Reason.ROUTE_NOT_SET_UP,
                f"set up {ref.feature} first: recipe {ref.recipe} ({ref.engine}) is not ready on this installation "
                f"({problem}); run: {command}",
                feature=ref.feature,
                recipe=ref.recipe,
                engine=ref.engine,
                **metadata,
            )

        if resolved.chosen.needs_preparation:
            key, folder = self.store.prepared_place(resolved.chosen.revision, pins)
            problem = check_prepared(folder, key, pins, deep=True)
            if problem is not None:
                raise not_set_up(f"its prepared folder {key}: {problem}", revision=key)
            return self._route_files({}, folder, {})
        by_role, pins_by_role = {}, {}
        for pin, spec in zip(pins, resolved.recipe.files, strict=True):
            check = self.store.check_by_hash(pin)
            if not check.verified:
                raise not_set_up(
                    f"{pin.name} is missing" if not check.present else f"refused {check.detail}", file=pin.name
                )
            by_role[spec.role or spec.name] = self.store.model_path(pin)
            pins_by_role[spec.role or spec.name] = pin
        return self._route_files(by_role, None, pins_by_role)

    def _route_files(self, by_role: dict[str, Path], prepared: Path | None, pins: dict[str, FilePin]) -> RouteFiles:
        """A route's verified files with how this service runs every route (its settings), in one place."""
        return RouteFiles(
            by_role,
            prepared,
            self.cpu_threads,
            pins,
            gpu_precision=self.gpu_precision,
            gpu_compile=self.gpu_compile,
            cpu_spin=self.cpu_spin,
            bulk_niceness=self.bulk_niceness,
            host=self.host,
        )

    def close(self) -> None:
        for loaded in self._loaded.values():
            loaded.close()
        self._loaded.clear()
        self.host.shutdown(wait=False)


def _give_back(unloaded: list[LoadedRoute[Any]]) -> None:
    """The memory of unloaded routes back to the system: their threads ended (nothing else holds
    their models), the cycles collected, a GPU's cached blocks freed, glibc's heaps trimmed."""
    if not unloaded:
        return
    for loaded in unloaded:
        loaded.join(timeout=10.0)
    unloaded.clear()
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        with contextlib.suppress(RuntimeError):
            torch.cuda.empty_cache()
    memory.trim()


__all__ = ["LoadedRoute", "Notices", "RouteLoader", "ServiceError"]
