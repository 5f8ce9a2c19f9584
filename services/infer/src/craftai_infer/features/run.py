"""One request's run through a feature, and the one way a run becomes an RPC's event stream.

A feature is a coroutine `work(run)` that resolves and loads its route, then goes through its
stages (decode, model, encode, ...) and returns the RPC's result message: `run.result(kind)`,
the final event's own, written in place (protobuf's upb runtime copies a message put into another
by serialising and parsing it again: ~29 ms for a 10 MB cutout in the service, against ~4 ms to
set its bytes in place: tools/bench/proto_copies.py); a result made apart is copied in. `Run` carries what
happens on the way: progress at the start of each stage, notices, and the time each stage took
(`stage()` is the only place stages are timed). `stream()` runs the feature and yields its
progress and notices as they happen, then exactly one result; a caller that goes away cancels the
run (model work already on a worker finishes there, and its answer is dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from craftai_common.errors import invalid_argument, resource_exhausted
from craftai_infer.loader import LoadedRoute, Notices, RouteLoader
from craftai_wire.v1 import catalogue_pb2, common_pb2
from craftai_wire.vocabulary import Reason

E = TypeVar("E")  # an RPC's event message: a oneof of progress, notice and result
M = TypeVar("M", bound=Message)
Item = common_pb2.Progress | common_pb2.Notice
_DONE = object()


def progress(stage: str, done: int, total: int, message: str, unit: str = "steps") -> common_pb2.Progress:
    return common_pb2.Progress(stage=stage, done=done, total=total, unit=unit, message=message)


class Run:
    """A request's progress, notices and stage timings. Touched from the event loop only."""

    def __init__(self, stages: Sequence[str] = ()) -> None:
        self.started = time.perf_counter()
        self.stages = tuple(stages)  # the stages after the load, in order: their progress counts them
        self.stages_ms: dict[str, float] = {}
        self.notices = Notices([])
        self._items: asyncio.Queue[Item | object] = asyncio.Queue()
        self.answer: Message | None = None  # the final event's result message (`stream` sets it)
        self._held: list[LoadedRoute[Any]] = []  # routes this run keeps loaded until it ends

    def hold(self, loaded: LoadedRoute[Any]) -> LoadedRoute[Any]:
        """Keep `loaded` from being unloaded until the run ends (`release`)."""
        loaded.hold()
        return self.adopt(loaded)

    def adopt(self, loaded: LoadedRoute[Any]) -> LoadedRoute[Any]:
        """`loaded` as RouteLoader.get answers it, already held: released when the run ends."""
        self._held.append(loaded)
        return loaded

    def release(self) -> None:
        """The run is over: the routes it held may be unloaded once idle."""
        for loaded in self._held:
            loaded.release()
        self._held.clear()

    def result(self, kind: type[M]) -> M:
        """The RPC's result message to write the answer in: the final event's own (or a new one
        where no stream waits for it), so that it is never copied."""
        if self.answer is None:
            self.answer = kind()
        if not isinstance(self.answer, kind):
            raise TypeError(f"this run answers {type(self.answer).__name__}, not {kind.__name__}")
        return self.answer

    def progress(self, stage: str, done: int, total: int, message: str, unit: str = "steps") -> None:
        self._items.put_nowait(progress(stage, done, total, message, unit))

    def publish_notices(self) -> None:
        """Send the notices raised so far (e.g. by the model's fallback) into the stream."""
        for notice in self.notices.items:
            self._items.put_nowait(notice)
        self.notices.items.clear()

    @contextlib.contextmanager
    def stage(self, name: str, message: str) -> Iterator[None]:
        """Progress when the stage starts, its milliseconds when it ends, its notices after it."""
        self.progress(name, self.stages.index(name), len(self.stages), message)
        started = time.perf_counter()
        yield
        self.stages_ms[name] = (time.perf_counter() - started) * 1000
        self.publish_notices()

    def timing(self) -> common_pb2.Timing:
        return common_pb2.Timing(stages_ms=self.stages_ms, total_ms=(time.perf_counter() - self.started) * 1000)


async def items(run: Run, task: asyncio.Future[Any]) -> AsyncIterator[Item]:
    """The progress and notices of `run` as they come, until `task` (its work) is done."""
    task.add_done_callback(lambda _task: run._items.put_nowait(_DONE))
    while (item := await run._items.get()) is not _DONE:
        yield item  # type: ignore[misc]


async def stream(event: Callable[..., E], work: Callable[[Run], Awaitable[Any]]) -> AsyncIterator[E]:
    """The feature's run as the RPC's events: progress and notices as they come, then the result."""
    run = Run()
    final: Any = event()
    run.answer = final.result
    task = asyncio.ensure_future(work(run))
    try:
        async for item in items(run, task):
            if isinstance(item, common_pb2.Notice):
                yield event(notice=item)
            else:
                yield event(progress=item)
        result = task.result()
        run.publish_notices()
        while not run._items.empty():
            left = run._items.get_nowait()
            yield event(notice=left) if isinstance(left, common_pb2.Notice) else event(progress=left)
        if result is run.answer:
            final.result.SetInParent()  # set, even where every field of the result is its default
            yield final
        else:
            yield event(result=result)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        run.release()


# What an answer holds beside the pictures the caller names (route, sizes, timing, notices): far less.
BESIDE_PAYLOAD = 1 << 20


def check_size(answer: Message, limit: int, what: str, fewer: str, *, payload: int | None = None) -> None:
    """An answer larger than the message limit cannot be sent (gRPC would end the call with a bare
    "larger than max"): say so in words a caller can act on (`fewer`: how to ask for less).
    `payload`: the bytes of the pictures it carries, where the caller knows them; an answer far
    under the limit is then not measured (measuring serialises it, a copy of every picture)."""
    if payload is not None and payload + BESIDE_PAYLOAD <= limit:
        return
    check_bytes(answer.ByteSize(), limit, what, fewer)


def check_bytes(size: int, limit: int, what: str, fewer: str) -> None:
    """RESOURCE_EXHAUSTED (LIMIT_REACHED) where `size` bytes of an answer (`what`, in words) are
    more than one message may carry, saying how to ask for less (`fewer`)."""
    if size > limit:
        raise resource_exhausted(
            Reason.LIMIT_REACHED,
            f"{what} come to {size:,} bytes, more than the {limit:,} bytes a message may carry "
            f"(CRAFTAI_MAX_MESSAGE_BYTES); {fewer}",
            answer_bytes=str(size),
            limit_bytes=str(limit),
        )


async def resolve(loader: RouteLoader, route: common_pb2.RouteRef, feature: str) -> catalogue_pb2.ResolveRouteResponse:
    """The route the catalogue chooses for `feature` (recipe and engine as asked, else advised)."""
    if route.feature and route.feature != feature:
        raise invalid_argument(
            Reason.UNKNOWN_FEATURE, f"this RPC serves {feature}, not {route.feature}", field="route.feature"
        )
    return await loader.resolve(common_pb2.RouteRef(feature=feature, recipe=route.recipe, engine=route.engine))


async def load(loader: RouteLoader, resolved: catalogue_pb2.ResolveRouteResponse, run: Run) -> LoadedRoute[Any]:
    """The loaded route; its first load is reported as "load" progress (with the warm-up's steps)."""
    if loader.is_loaded(resolved):
        return run.adopt(await loader.get(resolved))
    r = resolved.route
    run.progress("load", 0, 1, f"loading {r.recipe} ({r.engine})")
    started = time.perf_counter()
    loop = asyncio.get_running_loop()

    def step(message: str) -> None:  # called from the loading thread
        loop.call_soon_threadsafe(run.progress, "load", 0, 1, message)

    loaded = run.adopt(await loader.get(resolved, step))
    elapsed = (time.perf_counter() - started) * 1000
    run.progress("load", 1, 1, f"loaded {r.recipe} on {loaded.device} in {elapsed:.0f} ms")
    return loaded
