"""The queue in front of every worker (craftai_infer.scheduling): like jobs that wait together run
as one batch, grouped by key; results go back to their own callers; a caller that leaves is
dropped; errors reach every caller of the batch; interactive work runs before bulk work; tenants
take turns within a class; on a lane, interactive work runs beside a bulk batch."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from craftai_infer.scheduling import (
    CpuPool,
    WorkClass,
    Workers,
    WorkQueue,
    classified,
    made_at_lower_priority,
    roles,
    running_class,
    submitted,
    work_class_var,
)

BULK, INTERACTIVE = WorkClass.BULK, WorkClass.INTERACTIVE


class Model:
    """A model's calls as the workers make them: each batch recorded with its thread; a batch
    that starts with a held item waits for `release` (the model busy for as long as a test needs)."""

    def __init__(self, held: Sequence[int] = (0,)) -> None:
        self.batches: list[list[int]] = []
        self.threads: dict[int, str] = {}
        self.held = set(held)
        self.release = threading.Event()
        self.started = threading.Event()

    def run(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        for item in items:
            self.threads[item] = threading.current_thread().name
        self.started.set()
        if self.held & set(items):
            assert self.release.wait(10), "the test never released the model"
        return [i * 10 for i in items]


@pytest.fixture
def make() -> Iterator[Callable[..., tuple[WorkQueue[int, int], Model]]]:
    made: list[Workers[int, int]] = []

    def build(
        *,
        max_batch: int = 8,
        window_s: float = 0.0,
        threads: int = 1,
        lane: int = 0,
        held: Sequence[int] = (0,),
        batch_limit: Callable[[object], int] | None = None,
    ) -> tuple[WorkQueue[int, int], Model]:
        model = Model(held)
        queue: WorkQueue[int, int] = WorkQueue("test", max_batch=max_batch, window_s=window_s, batch_limit=batch_limit)
        made.append(Workers(queue, model.run, roles=roles(threads, lanes=lane), name="model"))
        return queue, model

    yield build
    for workers in made:
        workers.close()


def job(
    queue: WorkQueue[int, int], item: int, key: object = "k", work_class: WorkClass = BULK, tenant: str = "app"
) -> asyncio.Future[int]:
    return asyncio.ensure_future(submitted(queue, item, batch_key=key, work_class=work_class, tenant=tenant))


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the condition never became true"
        await asyncio.sleep(0.002)


async def busy_with(queue: WorkQueue[int, int], model: Model, item: int = 0, **kwargs: Any) -> asyncio.Future[int]:
    """`item` submitted and taken by a worker (which holds it until `model.release`)."""
    first = job(queue, item, **kwargs)
    await until(model.started.is_set)
    return first


async def results(*futures: Awaitable[int]) -> list[int]:
    return list(await asyncio.gather(*futures))


async def test_an_idle_model_runs_at_once_and_what_arrives_meanwhile_runs_together(make: Any) -> None:
    queue, model = make(window_s=5.0)
    first = await busy_with(queue, model)  # found the model idle: ran alone, without the (long) window
    rest = [job(queue, i) for i in range(1, 5)]
    await until(lambda: queue.depth == 4)
    model.release.set()
    assert await results(first, *rest) == [0, 10, 20, 30, 40]
    assert model.batches == [[0], [1, 2, 3, 4]]  # the four that arrived while it ran went together
    assert all(name.startswith("model") for name in model.threads.values())  # never on the event loop
    assert (queue.batches, queue.items) == (2, 5)


async def test_a_batch_is_at_most_max_batch(make: Any) -> None:
    queue, model = make(max_batch=3)
    first = await busy_with(queue, model)
    rest = [job(queue, i) for i in range(1, 7)]
    await until(lambda: queue.depth == 6)
    model.release.set()
    assert await results(first, *rest) == [i * 10 for i in range(7)]
    assert model.batches == [[0], [1, 2, 3], [4, 5, 6]]


async def test_a_key_with_a_limit_of_its_own_runs_in_smaller_batches_and_a_click_goes_between(make: Any) -> None:
    # the SAM route on a GPU: a grid call takes at most 2 of the batches waiting, so a click that
    # arrives behind six of them runs after the first call, not after all six
    queue, model = make(max_batch=8, batch_limit=lambda key: 2 if key == "grid" else 99)
    first = await busy_with(queue, model, key="grid")
    grid = [job(queue, i, key="grid", tenant=f"app{i % 3}") for i in range(1, 7)]
    encodes = [job(queue, i, key="encode") for i in range(10, 20)]
    await until(lambda: queue.depth == 16)
    click = job(queue, 99, key="click", work_class=INTERACTIVE)
    await until(lambda: queue.depth == 17)
    model.release.set()
    await results(first, *grid, *encodes, click)
    assert model.batches[1] == [99]  # the click after the call in flight
    assert [len(b) for b in model.batches if b[0] < 10 and b != [99]] == [1, 2, 2, 2]  # the limit
    assert [len(b) for b in model.batches if 10 <= b[0] < 20] == [8, 2]  # other keys: max_batch (8)
    assert queue.limit("grid") == 2 and queue.limit("encode") == 8


async def test_items_group_by_key_and_unkeyed_items_run_alone(make: Any) -> None:
    queue, model = make()
    first = await busy_with(queue, model)
    rest = [job(queue, i, key=i % 2) for i in range(1, 7)] + [job(queue, 7, key=None), job(queue, 8, key=None)]
    await until(lambda: queue.depth == 8)
    model.release.set()
    assert await results(first, *rest) == [i * 10 for i in range(9)]
    assert model.batches == [[0], [1, 3, 5], [2, 4, 6], [7], [8]]


async def test_the_window_caps_the_wait_of_bulk_work_behind_a_long_batch(make: Any) -> None:
    """Two workers: bulk work arriving behind a long batch waits the window at most, then goes to
    the free worker."""
    queue, model = make(window_s=0.05, threads=2)
    first = await busy_with(queue, model)
    second = job(queue, 1)
    await until(lambda: model.batches == [[0], [1]])  # the window passed: the free worker took it
    model.release.set()
    assert await results(first, second) == [0, 10]


async def test_interactive_work_never_waits_for_the_window(make: Any) -> None:
    queue, model = make(window_s=30.0, threads=2)
    first = await busy_with(queue, model)
    click = job(queue, 1, work_class=INTERACTIVE)
    assert await click == 10  # the other worker took it at once, not after 30 s
    model.release.set()
    await first


async def test_a_caller_that_leaves_is_dropped(make: Any) -> None:
    queue, model = make()
    first = await busy_with(queue, model)
    leaving, staying = job(queue, 1), job(queue, 2)
    await until(lambda: queue.depth == 2)
    leaving.cancel()
    await asyncio.sleep(0)
    assert queue.depth == 1
    model.release.set()
    assert await results(first, staying) == [0, 20]
    assert model.batches == [[0], [2]]


async def test_an_error_reaches_every_caller_of_the_batch() -> None:
    def fail(items: list[int]) -> list[int]:
        raise RuntimeError("the GPU fell over")

    queue: WorkQueue[int, int] = WorkQueue("test", max_batch=4)
    workers = Workers(queue, fail, roles=roles(1), name="model")
    try:
        answers = await asyncio.gather(*(job(queue, i) for i in range(3)), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) and "fell over" in str(r) for r in answers)
    finally:
        workers.close()


async def test_depth_counts_what_waits_while_the_model_runs(make: Any) -> None:
    queue, model = make()
    first = await busy_with(queue, model)
    held = [job(queue, i, tenant=f"app-{i % 2}") for i in (1, 2, 3)]
    await until(lambda: queue.depth == 3)
    waiting = {(w.work_class, w.tenant): w.jobs for w in queue.waiting()}
    assert waiting == {(BULK, "app-1"): 2, (BULK, "app-0"): 1}
    model.release.set()
    assert await results(first, *held) == [0, 10, 20, 30]
    assert queue.depth == 0


async def test_interactive_work_runs_before_bulk_work_that_waited_longer(make: Any) -> None:
    queue, model = make(max_batch=1)
    first = await busy_with(queue, model)
    bulk = [job(queue, i) for i in (1, 2, 3)]
    await until(lambda: queue.depth == 3)
    click = job(queue, 4, work_class=INTERACTIVE, tenant="editor")
    await until(lambda: queue.depth == 4)
    model.release.set()
    assert await results(first, *bulk, click) == [0, 10, 20, 30, 40]
    assert model.batches == [[0], [4], [1], [2], [3]]


async def test_tenants_take_turns_within_a_class(make: Any) -> None:
    """One app queued five encodes, then another app one: the second app's runs after one of the
    first app's, not after all five."""
    queue, model = make(max_batch=1)
    first = await busy_with(queue, model, tenant="batch-tool")
    many = [job(queue, i, tenant="batch-tool") for i in (1, 2, 3, 4, 5)]
    await until(lambda: queue.depth == 5)
    other = job(queue, 6, tenant="editor")
    await until(lambda: queue.depth == 6)
    model.release.set()
    await results(first, *many, other)
    assert model.batches == [[0], [1], [6], [2], [3], [4], [5]]


async def test_a_batch_takes_like_jobs_of_every_tenant_in_turns(make: Any) -> None:
    queue, model = make(max_batch=3)
    first = await busy_with(queue, model, tenant="a")
    a = [job(queue, i, tenant="a") for i in (1, 2, 3, 4)]
    b = [job(queue, i, tenant="b") for i in (5, 6)]
    await until(lambda: queue.depth == 6)
    model.release.set()
    await results(first, *a, *b)
    assert model.batches == [[0], [1, 5, 2], [6, 3, 4]]


async def test_on_a_lane_a_click_runs_beside_a_bulk_batch_and_bulk_work_never_takes_the_lane(make: Any) -> None:
    queue, model = make(lane=1, held=(0,))
    encode = await busy_with(queue, model)  # the worker that takes every class is busy
    more_bulk = job(queue, 1)
    click = job(queue, 2, work_class=INTERACTIVE)
    assert await click == 20  # answered while the encode still runs
    assert model.batches == [[0], [2]] and queue.depth == 1  # the bulk job waits for its own worker
    assert model.threads[2] == "model-1"  # the lane (threads are named in order: every class, then lanes)
    model.release.set()
    assert await results(encode, more_bulk) == [0, 10]
    assert model.threads[1] == "model-0"


async def test_closing_tells_the_callers_still_waiting() -> None:
    model = Model()
    queue: WorkQueue[int, int] = WorkQueue("test")
    workers = Workers(queue, model.run, roles=roles(1), name="model")
    first = await busy_with(queue, model)
    waiting = job(queue, 1)
    await until(lambda: queue.depth == 1)
    workers.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    model.release.set()
    assert await first == 0  # the batch running when it closed finished
    with pytest.raises(RuntimeError, match="closed"):
        await submitted(queue, 2)


async def test_the_cpu_pool_runs_work_in_the_callers_class_and_context() -> None:
    pool = CpuPool(1, "pictures")
    gate = threading.Event()
    order: list[str] = []
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="")

    def step(name: str) -> str:
        if name == "blocker":
            gate.wait(10)
        order.append(name)
        return marker.get()

    try:
        marker.set("request-7")
        blocker = asyncio.ensure_future(pool.run(step, "blocker"))
        await until(lambda: pool.queue.busy == 1)
        large = asyncio.ensure_future(pool.run(step, "a large cutout"))
        await until(lambda: pool.queue.depth == 1)
        with classified(INTERACTIVE):
            mask = asyncio.ensure_future(pool.run(step, "a click's mask"))
            await until(lambda: pool.queue.depth == 2)
            # the Executor face, as run_in_executor and Executor.map use it: in the caller's class too
            face = asyncio.get_running_loop().run_in_executor(pool, step, "a band")
        assert work_class_var.get() is BULK
        await until(lambda: pool.queue.depth == 3)
        gate.set()
        assert await blocker == "request-7"  # the request's context (its log ids) reaches the pool
        await asyncio.gather(large, mask, face)
        assert order == ["blocker", "a click's mask", "a band", "a large cutout"]
    finally:
        pool.shutdown()


async def test_nothing_of_a_batch_outlives_it_on_the_worker() -> None:
    """A request's picture is given back to the memory budget when the array is freed: the worker
    that ran it must hold no reference once its answer is delivered (it then waits for the next
    job, maybe for long)."""

    class Payload:
        pass

    queue: WorkQueue[Payload, int] = WorkQueue("test")
    workers = Workers(queue, lambda payloads: [1 for _ in payloads], roles=roles(1, lanes=1), name="model")
    try:
        for work_class in (BULK, INTERACTIVE):
            payload = Payload()
            freed = weakref.ref(payload)
            assert await submitted(queue, payload, work_class=work_class) == 1
            del payload
            await until(lambda: queue.busy == 0)
            assert freed() is None  # freed by its last reference going, no collector needed
    finally:
        workers.close()


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


async def test_bulk_work_runs_at_a_lower_priority_and_interactive_work_does_not() -> None:
    """On the CPU the bulk threads are niced (and what they start inherits it), the lanes are not:
    the cores they share go to the click first."""
    base = _niceness()
    queue: WorkQueue[str, int] = WorkQueue("test")
    workers = Workers(
        queue, lambda payloads: [_niceness() for _ in payloads], roles=roles(1, lanes=1, bulk_niceness=5), name="model"
    )
    try:
        assert await submitted(queue, "encode", work_class=BULK) == min(19, base + 5)
        assert await submitted(queue, "click", work_class=INTERACTIVE) == base
    finally:
        workers.close()


def test_what_is_made_at_a_lower_priority_starts_its_threads_there() -> None:
    """An onnxruntime session's pool is started with the session: made so, it runs at that priority."""
    base = _niceness()

    def make() -> int:
        seen: list[int] = []
        started = threading.Thread(target=lambda: seen.append(_niceness()))
        started.start()
        started.join()
        return seen[0]

    assert made_at_lower_priority(3, make) == min(19, base + 3)
    assert made_at_lower_priority(0, make) == base
    assert _niceness() == base  # the caller's own priority is untouched


async def test_a_worker_knows_the_class_of_the_batch_it_runs() -> None:
    # what labels a model call's duration (craftai_infer_model_call_seconds): INTERACTIVE is 0, not None
    seen: list[WorkClass | None] = []

    def run(items: list[int]) -> list[int]:
        seen.append(running_class())
        return items

    queue: WorkQueue[int, int] = WorkQueue("test")
    workers = Workers(queue, run, roles=roles(1), name="model")
    try:
        await job(queue, 1, work_class=INTERACTIVE)
        await job(queue, 2)
    finally:
        workers.close()
    assert seen == [INTERACTIVE, BULK]
    assert running_class() is None  # not a worker's thread


async def test_a_workers_batch_hands_its_class_to_the_cpu_pool() -> None:
    """A route's batch that spreads its pictures over a CpuPool (RouteFiles.host) gives them the
    batch's class, whatever the worker thread's context says (its default: bulk)."""
    pool = CpuPool(1, "route-host")
    seen: list[WorkClass | None] = []

    def batch(payloads: Sequence[int]) -> list[int]:
        seen.extend(pool.submit(running_class).result(10) for _ in payloads)
        return list(payloads)

    queue: WorkQueue[int, int] = WorkQueue("test")
    workers = Workers(queue, batch, roles=roles(1), name="model")
    try:
        assert await submitted(queue, 1, work_class=INTERACTIVE) == 1
        assert await submitted(queue, 2, work_class=BULK) == 2
        assert seen == [INTERACTIVE, BULK]
    finally:
        workers.close()
        pool.shutdown()


def test_a_cpu_pool_starts_its_threads_with_its_first_job() -> None:
    """A pool a process never uses (the route-host pool where no route has host steps) holds no
    threads; its first job starts them all."""

    def named(prefix: str) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(prefix)]

    pool = CpuPool(3, "lazy-pool")
    try:
        assert pool.threads == 0 and not named("lazy-pool-")
        assert pool.submit(lambda: 7).result(10) == 7
        assert pool.threads == 3 and len(named("lazy-pool-")) == 3
    finally:
        pool.shutdown()
    unused = CpuPool(2, "never-used")
    unused.shutdown()
    assert not named("never-used-")
    with pytest.raises(RuntimeError, match="the never-used pool is shut down"):
        unused.submit(lambda: 7)


async def test_a_steady_stream_runs_on_the_worker_that_went_idle_last(make: Any) -> None:
    """One job at a time through four workers: each is taken by the worker that finished the one
    before (its scratch arrays and heap warm), not by whichever of the idle ones wakes first."""
    queue, model = make(threads=4, held=())
    await until(lambda: queue.idle_workers == 4)
    for item in range(1, 21):
        assert await job(queue, item, key=None) == item * 10
        await until(lambda: queue.idle_workers == 4)  # the worker back to waiting before the next job
    assert len(set(model.threads.values())) == 1, model.threads


async def test_a_bulk_job_wakes_a_worker_that_takes_bulk_work_though_a_lane_went_idle_last(make: Any) -> None:
    queue, model = make(threads=1, lane=1, held=())
    await until(lambda: queue.idle_workers == 2)
    assert await job(queue, 1, work_class=INTERACTIVE) == 10
    await until(lambda: queue.idle_workers == 2)
    for item in (2, 3):
        assert await job(queue, item) == item * 10  # bulk: the lane is not woken, and the job not lost
        await until(lambda: queue.idle_workers == 2)
    assert model.threads[2] == model.threads[3] == "model-0"


async def test_a_workers_thread_is_named_where_the_system_shows_it() -> None:
    queue: WorkQueue[int, int] = WorkQueue("test")
    seen: list[str] = []

    def run(items: list[int]) -> list[int]:
        seen.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())
        return items

    workers = Workers(queue, run, roles=roles(1), name="model-u2netp-onnxruntime")
    try:
        assert await job(queue, 1) == 1
    finally:
        workers.close()
    assert seen == ["model-u2netp-on"]  # the first 15 bytes of "model-u2netp-onnxruntime-0"
