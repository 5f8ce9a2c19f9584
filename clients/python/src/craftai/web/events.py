"""Server-sent events: a stream of the SDK's events (setup), or a call's progress then its result
(segment everything), as `event: <name>` / `data: <JSON>` blocks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi.responses import Response, StreamingResponse
from google.protobuf.message import Message

from craftai.errors import CraftAiError
from craftai.installation import SetupEvent, SetupOutput
from craftai.web.answers import event
from craftai.web.errors import error_body
from craftai_wire.v1 import common_pb2

ResultT = TypeVar("ResultT")


async def stream_of(events: AsyncGenerator[SetupEvent, None]) -> Response:
    """A stream's events (progress, notice, then its result) as server-sent events; an error before
    the first is an HTTP error, one after it an `error` event. The result's JSON is its message's."""
    try:
        first = await anext(events)
    except CraftAiError:
        await events.aclose()
        raise

    async def sent() -> AsyncGenerator[str, None]:
        try:
            given: SetupEvent | None = first
            while given is not None:
                wire: Message = given.proto if isinstance(given, SetupOutput) else given
                name = {"Progress": "progress", "Notice": "notice"}.get(wire.DESCRIPTOR.name, "result")
                yield sse(name, event(wire))
                given = await anext(events, None)
        except CraftAiError as exc:
            yield sse("error", error_body(exc)["error"])
        finally:
            await events.aclose()

    return event_stream(sent())


async def progress_stream(
    call: Callable[[Callable[[common_pb2.Progress], None]], Awaitable[ResultT]],
    answer: Callable[[ResultT], dict[str, Any]],
) -> Response:
    """A call's progress as server-sent events, then its `result` (`answer` of its value) or
    `error`. An error before the first progress is an HTTP error; a caller that leaves cancels
    the call (the services stop the work)."""
    progress: asyncio.Queue[common_pb2.Progress] = asyncio.Queue()
    task = asyncio.ensure_future(call(progress.put_nowait))

    async def next_event() -> common_pb2.Progress | None:
        """The next progress, or None once the call has ended and every progress was sent."""
        while progress.empty() and not task.done():
            getter = asyncio.ensure_future(progress.get())
            try:
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                return getter.result()
        return None if progress.empty() else progress.get_nowait()

    try:
        first = await next_event()
        if first is None and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    except BaseException:
        task.cancel()
        raise

    async def sent() -> AsyncGenerator[str, None]:
        try:
            given = first
            while given is not None:
                yield sse("progress", event(given))
                given = await next_event()
            try:
                yield sse("result", answer(task.result()))
            except CraftAiError as exc:
                yield sse("error", error_body(exc)["error"])
        finally:
            task.cancel()

    return event_stream(sent())


def event_stream(events: AsyncGenerator[str, None]) -> StreamingResponse:
    """Server-sent events as they come (no cache, no proxy buffering)."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def sse(name: str, data: dict[str, Any]) -> str:
    """One server-sent event (JSON has no newline, so one data line)."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
