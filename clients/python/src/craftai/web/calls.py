"""Every HTTP call runs as a task of its own, so that it can be cancelled: when its client leaves
(after its body was read: a JSON answer's call as much as an event stream's; the gRPC call is
cancelled with it and the services stop the work), and when the gateway stops and its grace has
passed (answered 503, the gateway stopping, when its answer had not begun). A client that leaves is logged
once, at INFO, without a traceback: it is not the gateway's failure.

A request whose body was not read whole when its answer starts (refused on its headers: no key, too
large, too many uploads) is answered with `Connection: close`, so the rest of its body is never read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from craftai.errors import CraftAiError
from craftai.web.errors import error_response
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.web")
CLOSE = (b"connection", b"close")


class InFlight:
    """The calls running now, for the gateway's stop."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False

    def cancel_all(self) -> int:
        """Cancel every call still running (the grace is over); answers how many."""
        self.stopping = True
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            log.warning("the gateway's grace is over: %d call(s) still running are cancelled", len(self.tasks))
        return len(self.tasks)


class Calls:
    """ASGI middleware: each HTTP call in a task of its own, watched for its client's departure."""

    def __init__(self, app: ASGIApp, in_flight: InFlight) -> None:
        self.app = app
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        call = _Call(scope, receive, send)
        task = asyncio.ensure_future(self.app(scope, call.receive, call.send))
        call.task = task
        self.in_flight.tasks.add(task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self.in_flight.tasks.discard(task)
            call.stop_watching()
        await call.settle(task, self.in_flight.stopping)


class _Call:
    """One call's messages: its body passed on as the app reads it; once it is read whole, the
    server's next message can only say that the client left (or that the answer is complete)."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        headers = Headers(scope=scope)
        self.declared = headers.get("content-length")
        self.has_body = "transfer-encoding" in headers or (self.declared or "0").strip() != "0"
        self.body_done = not self.has_body
        self._empty_body_given = not self.has_body  # a body-less request's empty body, given without waiting
        self.received = 0
        self.left = False
        self.over = asyncio.Event()  # the client left, or the answer is complete
        self.response_started = False
        self.response_complete = False
        self.task: asyncio.Task[None] | None = None
        self._watcher = asyncio.ensure_future(self._watch()) if self.body_done else None

    async def receive(self) -> Message:
        if self._empty_body_given:
            self._empty_body_given = False
            return {"type": "http.request", "body": b"", "more_body": False}
        if self.body_done:
            await self.over.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.left = not self.response_complete
            self.over.set()
            return message
        self.received += len(message.get("body", b""))
        if not message.get("more_body", False):
            self.body_done = True
            self._watcher = asyncio.ensure_future(self._watch())
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
            headers = list(message.get("headers", []))
            if not self.body_done and not any(name.lower() == b"connection" for name, _ in headers):
                message = {**message, "headers": [*headers, CLOSE]}
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.response_complete = True
        await self._send(message)

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass  # a body-less request's empty body (the app was given its own)
        if not self.response_complete:
            self.left = True
            if self.task is not None:
                self.task.cancel()
        self.over.set()

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    async def settle(self, task: asyncio.Task[None], stopping: bool) -> None:
        """What the call's end leaves to do: a departure logged; a call cancelled by the stop
        answered; any other failure raised (the server logs it)."""
        where = f"{self.scope['method']} {self.scope['path']}"
        if self.left:
            if not self.body_done:
                declared = self.declared or ""
                of = f" of {int(declared):,}" if declared.isdigit() else ""
                log.info("%s: the client left during its upload (%s%s bytes received)", where, f"{self.received:,}", of)
            elif task.cancelled():
                log.info("%s: the client left before its answer; its call was cancelled", where)
            else:
                log.info("%s: the client left before its answer", where)
            with contextlib.suppress(BaseException):
                task.result()  # what the departure caused (a disconnect, a cancel) is no failure
            return
        if task.cancelled():
            if not stopping:
                raise asyncio.CancelledError
            if not self.response_started:
                stopped = CraftAiError(
                    grpc.StatusCode.UNAVAILABLE, "the gateway is stopping: try again", Reason.SHUTTING_DOWN
                )
                await error_response(stopped)(self.scope, self.receive, self.send)
            elif not self.response_complete:
                await self.send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        task.result()
