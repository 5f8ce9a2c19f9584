"""Dynamic batching: requests within the window run together, grouped by key; results go back
to their own callers; a caller that leaves is dropped; errors reach every caller of the batch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from craftai_infer.batching import MicroBatcher


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[str] = set()

    def run(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        self.threads.add(threading.current_thread().name)
        return [i * 10 for i in items]


@pytest.fixture
def worker() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="model") as pool:
        yield pool


async def test_an_idle_model_runs_at_once_and_what_arrives_meanwhile_runs_together(
    worker: ThreadPoolExecutor,
) -> None:
    recorder = Recorder()
    batcher = MicroBatcher(recorder.run, worker, max_batch=8, window_s=5.0)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(5)))
    assert results == [0, 10, 20, 30, 40]
    # The first found the model idle and ran alone, without waiting for the (long) window; the
    # four that arrived while it ran went together as soon as it finished.
    assert recorder.batches == [[0], [1, 2, 3, 4]]
    assert all(name.startswith("model") for name in recorder.threads)  # never on the event loop
    assert batcher.stats.mean_size == 2.5


async def test_a_full_batch_goes_at_once(worker: ThreadPoolExecutor) -> None:
    recorder = Recorder()
    batcher = MicroBatcher(recorder.run, worker, max_batch=3, window_s=5.0)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(7))) == [i * 10 for i in range(7)]
    assert recorder.batches == [[0], [1, 2, 3], [4, 5, 6]]


async def test_items_group_by_key(worker: ThreadPoolExecutor) -> None:
    recorder = Recorder()
    batcher = MicroBatcher(recorder.run, worker, max_batch=8, window_s=5.0, key=lambda i: i % 2)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(7))) == [i * 10 for i in range(7)]
    assert sorted(recorder.batches) == [[0], [1, 3, 5], [2, 4, 6]]


async def test_the_window_caps_the_wait_behind_a_long_batch() -> None:
    """A route that runs two batches at once: what arrives behind a long one waits the window at
    most, then goes to the free worker."""
    release = threading.Event()

    def slow(items: Sequence[int]) -> list[int]:
        if items == [0]:
            release.wait(5)
        return [i * 10 for i in items]

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="model") as workers:
        batcher = MicroBatcher(slow, workers, max_batch=8, window_s=0.05, capacity=2)
        first = asyncio.ensure_future(batcher.submit(0))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0.2)  # the window has passed: the second is queued on the worker, not held back
        assert batcher.stats.batches == 2
        release.set()
        assert (await first, await second) == (0, 10)


async def test_with_a_capacity_the_window_waits_for_a_free_worker(worker: ThreadPoolExecutor) -> None:
    """One worker busy: what arrives behind it is held past the window and runs as one batch when
    the worker is free (not as many small batches queued on it); a full batch still goes at once."""
    release = threading.Event()
    batches: list[list[int]] = []

    def slow(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        if items == [0]:
            release.wait(5)
        return [i * 10 for i in items]

    batcher = MicroBatcher(slow, worker, max_batch=4, window_s=0.01, capacity=1)
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    held = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
    await asyncio.sleep(0.1)  # many windows have passed; the worker is still busy
    assert (batcher.stats.batches, batcher.waiting) == (1, 2)
    held += [asyncio.ensure_future(batcher.submit(i)) for i in (3, 4, 5, 6, 7)]
    await asyncio.sleep(0.05)
    assert batcher.stats.batches == 2 and batcher.waiting == 3  # 1-4 made a full batch: queued at once
    release.set()
    assert (await first, *[await h for h in held]) == (0, 10, 20, 30, 40, 50, 60, 70)
    assert batches == [[0], [1, 2, 3, 4], [5, 6, 7]]


async def test_a_caller_that_leaves_is_dropped(worker: ThreadPoolExecutor) -> None:
    recorder = Recorder()
    batcher = MicroBatcher(recorder.run, worker, max_batch=8, window_s=0.05)
    busy = asyncio.ensure_future(batcher.submit(0))  # keeps the model busy, so the next two wait
    await asyncio.sleep(0)
    leaving = asyncio.ensure_future(batcher.submit(1))
    staying = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0)
    leaving.cancel()
    assert (await busy, await staying) == (0, 20)
    assert recorder.batches == [[0], [2]]


async def test_an_error_reaches_every_caller_of_the_batch(worker: ThreadPoolExecutor) -> None:
    def fail(items: Sequence[int]) -> list[int]:
        raise RuntimeError("the GPU fell over")

    batcher = MicroBatcher(fail, worker, max_batch=4, window_s=0.05)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "fell over" in str(r) for r in results)


async def test_no_window_means_no_waiting(worker: ThreadPoolExecutor) -> None:
    recorder = Recorder()
    batcher = MicroBatcher(recorder.run, worker, max_batch=4, window_s=0.0)
    assert await batcher.submit(3) == 30
    assert recorder.batches == [[3]]


async def test_waiting_counts_what_is_held_back_while_the_model_runs(worker: ThreadPoolExecutor) -> None:
    release = threading.Event()
    seen: list[int] = []

    def slow(items: Sequence[int]) -> list[int]:
        release.wait(5)
        return list(items)

    batcher = MicroBatcher(slow, worker, max_batch=8, window_s=5.0)
    first = asyncio.ensure_future(batcher.submit(0))  # finds the model idle: dispatched at once
    await asyncio.sleep(0)
    held = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2, 3)]
    await asyncio.sleep(0)
    seen.append(batcher.waiting)
    release.set()
    assert await asyncio.gather(first, *held) == [0, 1, 2, 3]
    assert seen == [3] and batcher.waiting == 0
