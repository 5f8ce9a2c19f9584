"""Both SDK clients through the same test cases: AsyncAiClient used as its blocking twin.

`both(kind)` makes an AiClient, or an AsyncAiClient wrapped by `Blocking`: each coroutine method
runs on one event loop thread, each async generator is read item by item, and the sessions it
answers are wrapped the same way, so a test body written once calls either client alike.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, Literal, TypeVar

from craftai import AiClient, AsyncAiClient, AsyncSegmentSession

Kind = Literal["blocking", "asyncio"]
KINDS: tuple[Kind, ...] = ("blocking", "asyncio")
T = TypeVar("T")


class LoopThread:
    """An event loop running on a thread of its own (the loop an asyncio app would have)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="asyncio-client", daemon=True)
        self._thread.start()

    def run(self, awaitable: Awaitable[T], timeout: float = 300.0) -> T:
        async def awaited() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(awaited(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Blocking:
    """An asyncio SDK object (client or session) called as the blocking one is."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            answer = value(*args, **kwargs)
            if inspect.isasyncgen(answer):
                return self._iterate(answer)
            if inspect.isawaitable(answer):
                answer = self._loop.run(answer)
            if isinstance(answer, AsyncSegmentSession | AsyncAiClient):
                return Blocking(answer, self._loop)
            return answer

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def _iterate(self, events: AsyncIterator[Any]) -> Iterator[Any]:
        try:
            while True:
                try:
                    yield self._loop.run(anext(events))
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(events.aclose())  # type: ignore[attr-defined]

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run(self._target.close())


def both(kind: Kind, loop: LoopThread, app_id: str = "tests", **arguments: Any) -> Any:
    """An AiClient, or an AsyncAiClient called as one (typed Any: the two are used alike)."""
    if kind == "blocking":
        return AiClient(app_id=app_id, **arguments)
    return Blocking(AsyncAiClient(app_id=app_id, **arguments), loop)
