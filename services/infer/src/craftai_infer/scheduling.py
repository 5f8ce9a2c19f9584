"""Who runs next: interactive work before bulk work, and apps in turns within a class.

Many apps share one process's models, its CPU pool and its GPU. Every request has a class
(`WorkClass`), set for its task by its feature (`classified`): a segment prompt's decoder call and a
small matte are interactive; session encodes, the automatic mask generator's grid batches and large
mattes are bulk. Every place where requests wait for a worker is a `WorkQueue` served by
`Workers` threads: a free worker takes the oldest waiting job of the interactive class before any
of the bulk class, and within a class serves the tenants in turns (craftai_common.metadata: an app
with a key of its own, or every app id a `*` key admits together) rather than first come, first
served: one app's hundred queued encodes delay another app's one encode by one batch, not by a
hundred.

Jobs with the same batch key (a route's batched operation, and its own key: the input shape) run
as one call, up to `max_batch`, taken in the same turns. A job that finds a worker free runs at
once; jobs that arrive while the workers are busy run together when one is free. With several
workers, a partial batch of bulk work waits up to `window_s` for like jobs while another worker is
busy; interactive work never waits for companions. A job wakes the worker that went idle last
(not every idle one, nor the one idle longest), so a steady stream of requests runs on the same
warm thread: its scratch arrays (a route's per-thread buffers), its heap and its caches are the ones
already faulted in (tests/integration/test_memory_reuse.py).

A route runs one call at a time on a GPU (work on one device runs in order anyway): a decoder call
waits for at most the one bulk batch in flight. On the CPU a route also has an interactive lane:
threads that take interactive work only, so a click runs beside an encoder batch rather than after
it; and the threads that run bulk work do so at a lower CPU priority (CRAFTAI_BULK_NICENESS), as
do the threads they start, so that the cores they share go to the click first. Segment everything
queues a few grid batches at a time, so clicks and other tenants' work go between its batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Generic, TypeVar, cast

from prometheus_client import Histogram

from craftai_common.metadata import tenant_var
from craftai_common.observability import app_label

log = logging.getLogger("craftai.infer.scheduling")
P = TypeVar("P")  # a job's payload (what the workers' `execute` takes)
R = TypeVar("R")  # its result
T = TypeVar("T")


QUEUE_WAIT = Histogram(
    "craftai_infer_queue_wait_seconds",
    "How long jobs waited for a worker, by queue (a route's model, or a CPU pool), class and app",
    ["queue", "class", "app"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


# The class of the batch a worker runs on this thread (`running_class`).
_running = threading.local()


class WorkClass(IntEnum):
    """Lower runs first."""

    INTERACTIVE = 0
    BULK = 1

    @property
    def label(self) -> str:
        return self.name.lower()


# The class of the request this task serves (its feature sets it: `classified`).
work_class_var: contextvars.ContextVar[WorkClass] = contextvars.ContextVar("craftai_work_class", default=WorkClass.BULK)


@contextlib.contextmanager
def classified(work_class: WorkClass) -> Iterator[None]:
    """The block's work (model calls, CPU pool stages, decode budget) in `work_class`."""
    token = work_class_var.set(work_class)
    try:
        yield
    finally:
        work_class_var.reset(token)


@dataclass(eq=False)
class Job(Generic[P, R]):
    """One request waiting for a worker. `batch_key` None: it runs alone."""

    payload: P
    work_class: WorkClass
    tenant: str
    batch_key: Hashable | None
    deliver: Callable[[R | None, BaseException | None], None]
    enqueued: float = field(default_factory=time.monotonic)
    taken: bool = False


@dataclass(frozen=True)
class Waiting:
    """Jobs waiting in one class for one tenant."""

    work_class: WorkClass
    tenant: str
    jobs: int


@dataclass(eq=False)
class _Idle:
    """A worker waiting in `WorkQueue.take`: the classes it takes, and its own wake-up."""

    classes: tuple[WorkClass, ...]
    wake: threading.Condition


class WorkQueue(Generic[P, R]):
    """The jobs waiting for one set of workers, by class and tenant (thread-safe: the event loop
    puts, the workers take). `name` labels its wait times (QUEUE_WAIT)."""

    def __init__(
        self,
        name: str,
        *,
        max_batch: int = 1,
        window_s: float = 0.0,
        batch_limit: Callable[[Hashable], int] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.name = name
        self.max_batch = max_batch
        # the most jobs of one batch key a call takes (at most max_batch): a key whose calls are
        # long may be given smaller batches, so that interactive work waits less behind one
        self._batch_limit = batch_limit
        self.window_s = window_s
        self._lock = threading.Lock()
        # the workers waiting for a job, the most recently idle last: a job wakes the one that
        # went idle last (its thread's scratch arrays, heap and caches are the warm ones), not all
        self._idle: list[_Idle] = []
        # class -> tenant -> its jobs, oldest first; a tenant's place in the dict is its turn
        self._classes: dict[WorkClass, OrderedDict[str, deque[Job[P, R]]]] = {c: OrderedDict() for c in WorkClass}
        self._closed = False
        self.busy = 0  # workers running a batch taken from this queue
        self.batches = 0
        self.items = 0

    # -- the event loop's side -------------------------------------------------------------

    def put(self, job: Job[P, R]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the queue is closed")
            self._classes[job.work_class].setdefault(job.tenant, deque()).append(job)
            self._wake(job.work_class)

    def remove(self, job: Job[P, R]) -> bool:
        """Take a job back before a worker took it (its caller left); False when already taken."""
        with self._lock:
            if job.taken:
                return False
            tenants = self._classes[job.work_class]
            jobs = tenants.get(job.tenant)
            if jobs is None or job not in jobs:
                return False
            jobs.remove(job)
            if not jobs:
                del tenants[job.tenant]
            return True

    def waiting(self) -> list[Waiting]:
        with self._lock:
            return [
                Waiting(work_class, tenant, len(jobs))
                for work_class, tenants in self._classes.items()
                for tenant, jobs in tenants.items()
            ]

    @property
    def idle_workers(self) -> int:
        """Workers waiting for a job now."""
        with self._lock:
            return len(self._idle)

    @property
    def depth(self) -> int:
        with self._lock:
            return sum(len(jobs) for tenants in self._classes.values() for jobs in tenants.values())

    def close(self) -> list[Job[P, R]]:
        """Take no more jobs; the ones still waiting are returned (their callers are told)."""
        with self._lock:
            self._closed = True
            left = [job for tenants in self._classes.values() for jobs in tenants.values() for job in jobs]
            for tenants in self._classes.values():
                tenants.clear()
            self._wake_all()
            return left

    # -- the workers' side -----------------------------------------------------------------

    def take(self, classes: Sequence[WorkClass]) -> list[Job[P, R]] | None:
        """The next batch for a worker that serves `classes`, waiting for one; None once closed."""
        idle: _Idle | None = None
        with self._lock:
            while True:
                if self._closed:
                    return None
                batch, wait = self._next(classes)
                if batch:
                    now = time.monotonic()
                    for job in batch:
                        job.taken = True
                        QUEUE_WAIT.labels(self.name, job.work_class.label, app_label(job.tenant)).observe(
                            now - job.enqueued
                        )
                    self.busy += 1
                    self.batches += 1
                    self.items += len(batch)
                    return batch
                idle = idle or _Idle(tuple(classes), threading.Condition(self._lock))
                self._idle.append(idle)
                idle.wake.wait(wait)
                if idle in self._idle:  # its wait ran out, or every worker was woken
                    self._idle.remove(idle)

    def done(self) -> None:
        """A worker finished its batch: a partial batch held for company while it ran may be taken now."""
        with self._lock:
            self.busy -= 1
            if any(self._classes.values()):
                self._wake_all()

    def _wake(self, work_class: WorkClass) -> None:
        """Wake the most recently idle worker that takes `work_class` (a lane that takes interactive
        work only is not woken for bulk work); none idle: a busy one finds the job when it is done."""
        for k in range(len(self._idle) - 1, -1, -1):
            if work_class in self._idle[k].classes:
                self._idle.pop(k).wake.notify()
                return

    def _wake_all(self) -> None:
        for idle in self._idle:
            idle.wake.notify()
        self._idle.clear()

    def _next(self, classes: Sequence[WorkClass]) -> tuple[list[Job[P, R]], float | None]:
        """The batch to run now (empty: none), else how long to wait before looking again."""
        for work_class in sorted(classes):
            tenants = self._classes[work_class]
            if not tenants:
                continue
            first_tenant, first_jobs = next(iter(tenants.items()))
            head = first_jobs[0]
            batch = [head] if head.batch_key is None else self._like(tenants, head)
            if (
                work_class is WorkClass.BULK
                and head.batch_key is not None
                and len(batch) < self.limit(head.batch_key)
                and self.busy > 0
                and self.window_s > 0
            ):
                left = head.enqueued + self.window_s - time.monotonic()
                if left > 0:
                    return [], left  # a partial bulk batch waits for company while another worker runs
            for job in batch:
                jobs = tenants[job.tenant]
                jobs.remove(job)
                if not jobs:
                    del tenants[job.tenant]
            if first_tenant in tenants:
                tenants.move_to_end(first_tenant)  # it had its turn
            return batch, None
        return [], None

    def limit(self, batch_key: Hashable) -> int:
        """The most jobs with `batch_key` one call takes."""
        if self._batch_limit is None:
            return self.max_batch
        return max(1, min(self.max_batch, self._batch_limit(batch_key)))

    def _like(self, tenants: OrderedDict[str, deque[Job[P, R]]], head: Job[P, R]) -> list[Job[P, R]]:
        """Up to `limit` jobs with the head's batch key, one per tenant in turn, round after round."""
        assert head.batch_key is not None
        limit = self.limit(head.batch_key)
        matching = [[job for job in jobs if job.batch_key == head.batch_key] for jobs in tenants.values()]
        batch: list[Job[P, R]] = []
        depth = 0
        while len(batch) < limit:
            row = [jobs[depth] for jobs in matching if depth < len(jobs)]
            if not row:
                break
            batch.extend(row[: limit - len(batch)])
            depth += 1
        return batch


@dataclass(frozen=True)
class Role:
    """What one worker thread takes (interactive first where it takes both), and how much lower its
    CPU priority is than the process's (its nice value added; 0: the same)."""

    classes: tuple[WorkClass, ...]
    niceness: int = 0


def roles(threads: int, *, lanes: int = 0, bulk_niceness: int = 0) -> list[Role]:
    """The threads of a queue: `threads` take every class, or bulk work alone at a lower priority
    where `bulk_niceness` is set and `lanes` take the interactive work (the CPU: bulk work's threads
    and the threads they start - onnxruntime's and OpenMP's inherit it - give the cores to
    interactive work first); `lanes` more take interactive work only."""
    if lanes and bulk_niceness:
        return [Role((WorkClass.BULK,), bulk_niceness)] * threads + [Role((WorkClass.INTERACTIVE,))] * lanes
    return [Role(tuple(WorkClass))] * threads + [Role((WorkClass.INTERACTIVE,))] * lanes


def lower_priority(niceness: int) -> None:
    """This thread's CPU priority lowered by `niceness` (Linux: a thread's own nice value; the
    threads it starts inherit it). Raising it back needs a privilege a service does not have, so
    a thread's priority is set once, when it starts."""
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except OSError as exc:  # pragma: no cover - a platform without per-thread priorities
        log.debug("thread priority not lowered: %s", exc)


def name_native_thread(name: str) -> None:
    """This thread's name where the system shows it (Linux: `top -H`, `ps -L`, /proc/PID/task/*/comm,
    at most 15 bytes), so a process's CPU time and memory faults can be told apart by worker."""
    with (
        contextlib.suppress(OSError),  # not Linux, or /proc not mounted
        open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm,
    ):
        comm.write(name.encode()[:15].decode(errors="ignore"))


def made_at_lower_priority(niceness: int, make: Callable[[], T]) -> T:
    """`make()` on a thread of its own whose priority is lowered by `niceness`: what it starts (an
    onnxruntime session's thread pool, made with the session) keeps that priority. For engines
    whose every call is bulk work (an encoder on the CPU)."""
    if niceness <= 0:
        return make()
    made: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        lower_priority(niceness)
        try:
            made.append(make())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, name="made-at-lower-priority")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


class Workers(Generic[P, R]):
    """Threads that serve a `WorkQueue`, each in its `Role`. `execute(payloads)` answers one result
    per payload, in order (it raises for the whole batch). The threads are owned here: `close`
    ends them after their current batch and tells the callers still waiting."""

    def __init__(
        self,
        queue: WorkQueue[P, R],
        execute: Callable[[list[P]], Sequence[R]],
        *,
        roles: Sequence[Role],
        name: str,
    ) -> None:
        if not any(WorkClass.BULK in role.classes for role in roles):
            raise ValueError("a queue needs a worker that takes bulk work")
        if not any(WorkClass.INTERACTIVE in role.classes for role in roles):
            raise ValueError("a queue needs a worker that takes interactive work")
        self.queue = queue
        self._execute = execute
        self._threads = [
            threading.Thread(target=self._serve, args=(role,), name=f"{name}-{k}", daemon=True)
            for k, role in enumerate(roles)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        return len(self._threads)

    def _serve(self, role: Role) -> None:
        name_native_thread(threading.current_thread().name)
        lower_priority(role.niceness)
        while (batch := self.queue.take(role.classes)) is not None:
            try:
                self._run(batch)
            finally:
                del batch  # nothing of a batch outlives it here: its pictures give their budget back
                self.queue.done()

    def _run(self, batch: list[Job[P, R]]) -> None:
        """One batch, its answers delivered; its locals (the jobs, their payloads) end with it."""
        _running.work_class = batch[0].work_class  # a batch is of one class (`WorkQueue._next`)
        try:
            results: Sequence[R] = self._execute([job.payload for job in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} gave {len(results)} results")
        except BaseException as exc:
            for job in batch:
                job.deliver(None, exc)
        else:
            for job, result in zip(batch, results, strict=True):
                job.deliver(result, None)
        finally:
            _running.work_class = None

    def close(self) -> None:
        for job in self.queue.close():
            job.deliver(None, asyncio.CancelledError())

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds in all for the threads to end (after `close`)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def running_class() -> WorkClass | None:
    """The class of the batch this worker thread runs (None: not a worker's thread, or between batches)."""
    return cast(WorkClass | None, getattr(_running, "work_class", None))


async def submitted(
    queue: WorkQueue[P, R],
    payload: P,
    *,
    batch_key: Hashable | None = None,
    work_class: WorkClass | None = None,
    tenant: str | None = None,
) -> R:
    """`payload` through `queue`, awaited: the class and the tenant are the request's
    (`work_class_var`, craftai_common.metadata.tenant_var) unless given. A caller that leaves
    before a worker took its job takes it back; one that leaves after lets it finish and drops its
    answer."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()

    def deliver(result: R | None, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the service stopped
            loop.call_soon_threadsafe(_settle, future, result, error)

    job: Job[P, R] = Job(
        payload,
        work_class if work_class is not None else work_class_var.get(),
        tenant if tenant is not None else tenant_var.get(),
        batch_key,
        deliver,
    )
    queue.put(job)
    try:
        return await future
    except asyncio.CancelledError:
        queue.remove(job)
        raise


def _settle(future: asyncio.Future[R], result: R | None, error: BaseException | None) -> None:
    if future.done():
        return
    if isinstance(error, asyncio.CancelledError):
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(cast(R, result))


class CpuPool(Executor):
    """A CPU pool of the service (pictures decoded, outputs encoded) with the queue's order: a
    click's mask is encoded before a large cutout that waited longer; with `bulk_niceness`, bulk
    work has `threads` of its own at a lower priority and interactive work as many (`roles`).
    Usable where an Executor is expected (`loop.run_in_executor`, `Executor.map`): work given that
    way runs in the submitting thread's class and tenant."""

    def __init__(self, threads: int, name: str, *, bulk_niceness: int = 0) -> None:
        self.queue: WorkQueue[Callable[[], Any], Any] = WorkQueue(name)
        self._roles = roles(threads, lanes=threads if bulk_niceness else 0, bulk_niceness=bulk_niceness)
        self._name = name
        # started with the first job: a pool that a process never uses (a route's host steps where no
        # such route loads) holds no threads
        self._workers: Workers[Callable[[], Any], Any] | None = None
        self._starting = threading.Lock()
        self._closed = False

    def _started(self) -> None:
        if self._workers is not None:
            return
        with self._starting:
            if self._closed:
                raise RuntimeError(f"the {self._name} pool is shut down")
            if self._workers is None:
                self._workers = Workers(
                    self.queue, lambda calls: [call() for call in calls], roles=self._roles, name=self._name
                )

    @property
    def threads(self) -> int:
        """The threads running now (0 until the first job)."""
        return 0 if self._workers is None else len(self._roles)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the pool in this task's class, tenant and context (its log lines carry its ids)."""
        context = contextvars.copy_context()
        self._started()
        result: T = await submitted(self.queue, lambda: context.run(fn, *args))
        return result

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Executor's face: from any thread, in the caller's class (one job that runs alone); from
        a worker's thread, in the class of the batch it runs."""
        future: Future[T] = Future()
        batch_class = running_class()
        work_class = batch_class if batch_class is not None else work_class_var.get()

        def deliver(result: Any, error: BaseException | None) -> None:
            if not future.set_running_or_notify_cancel():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        self._started()
        self.queue.put(Job(lambda: fn(*args, **kwargs), work_class, tenant_var.get(), None, deliver))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._starting:
            self._closed = True
            workers = self._workers
        if workers is not None:
            workers.close()
