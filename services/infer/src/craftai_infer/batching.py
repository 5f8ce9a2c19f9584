"""Dynamic batching: requests for one model that arrive together run as one batch.

A request that finds the model idle runs at once (no added latency when the load is light);
requests that arrive while a batch runs wait for it and then run together (up to `max_batch`), or
after `window_s` at the latest while a worker is free (`capacity`: how many batches the executor
runs at once, the route's `concurrent_runs`). With every worker busy a partial batch waits for one:
sent to busy workers it would only wait in their queue, smaller than it could be (one GPU worker at
32 requests in flight ran batches of 1.7 so, docs/PERFORMANCE.md); a full batch still goes at once,
queued, so that the worker never waits for the event loop between batches. Each
caller still awaits its own result (and its own stream goes on); a caller that leaves before its
batch starts is dropped from it. Items are grouped by a key
(e.g. the input shape) because only like items stack into one tensor. Batches run on the model's
own worker, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger("craftai.infer.batching")
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Group(Generic[T, R]):
    items: list[T] = field(default_factory=list)
    futures: list[asyncio.Future[R]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True)
class BatchStats:
    batches: int
    items: int

    @property
    def mean_size(self) -> float:
        return self.items / self.batches if self.batches else 0.0


class MicroBatcher(Generic[T, R]):
    """`run` takes a list of like items and returns one result per item, in order."""

    def __init__(
        self,
        run: Callable[[Sequence[T]], Sequence[R]],
        executor: Executor,
        *,
        max_batch: int,
        window_s: float,
        key: Callable[[T], Hashable] = lambda _item: None,
        capacity: int = 1,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._run = run
        self._executor = executor
        self.max_batch = max_batch
        self.window_s = window_s
        self._key = key
        self._groups: dict[Hashable, _Group[T, R]] = {}
        self._batches = 0
        self._items = 0
        self._running = 0

    @property
    def stats(self) -> BatchStats:
        return BatchStats(self._batches, self._items)

    @property
    def waiting(self) -> int:
        """Items held back for a batch (the model busy, or the window open), not yet dispatched."""
        return sum(len(group.items) for group in self._groups.values())

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        key = self._key(item)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        group.items.append(item)
        group.futures.append(future)
        if len(group.items) >= self.max_batch or self.window_s <= 0 or self._running == 0:
            self._dispatch(key)
        elif group.timer is None:
            group.timer = loop.call_later(self.window_s, self._window_closed, key)
        return await future

    def _busy(self) -> bool:
        return self._running >= self.capacity

    def _window_closed(self, key: Hashable) -> None:
        """The window's end: the batch goes now, unless every worker is busy (then it goes, fuller,
        when one is free: `_finished`)."""
        group = self._groups.get(key)
        if group is None:
            return
        group.timer = None
        if not self._busy():
            self._dispatch(key)

    def _dispatch(self, key: Hashable) -> None:
        group = self._groups.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        live = [(item, fut) for item, fut in zip(group.items, group.futures, strict=True) if not fut.cancelled()]
        if not live:
            return
        items = [item for item, _ in live]
        futures = [fut for _, fut in live]
        self._batches += 1
        self._items += len(items)
        self._running += 1
        task = asyncio.get_running_loop().run_in_executor(self._executor, self._run, items)
        task.add_done_callback(lambda done: self._finished(done, futures))

    def _finished(self, done: asyncio.Future[Sequence[R]], futures: list[asyncio.Future[R]]) -> None:
        self._running -= 1
        _deliver(done, futures)
        for key in list(self._groups):  # what arrived meanwhile runs now, a batch per key, on the free workers
            if self._busy():
                break
            self._dispatch(key)


def _deliver(done: asyncio.Future[Sequence[R]], futures: list[asyncio.Future[R]]) -> None:
    if done.cancelled():
        for fut in futures:
            fut.cancel()
        return
    error = done.exception()
    if error is not None:
        for fut in futures:
            if not fut.done():
                fut.set_exception(error)
        return
    results = done.result()
    if len(results) != len(futures):
        mismatch = RuntimeError(f"a batch of {len(futures)} gave {len(results)} results")
        for fut in futures:
            if not fut.done():
                fut.set_exception(mismatch)
        return
    for fut, result in zip(futures, results, strict=True):
        if not fut.done():
            fut.set_result(result)
