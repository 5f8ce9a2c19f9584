"""The gateway's connections, bounded where uvicorn leaves them open: uvicorn's HTTP/1.1 protocol
(h11) with a bound on connections open at once, a deadline for each request's head, and answers
with a reason for a head too large, too slow or unreadable.

uvicorn closes an idle connection between requests (its keep-alive timeout) but has no deadline for
a request's line and headers: a client that connects and sends nothing, or its headers a byte at a
time, holds a descriptor for ever. Here a request's head must be complete within
CRAFTAI_WEB_HEADER_TIMEOUT_SECONDS of the connection (or of the previous answer on it), else the
connection is closed (with 408 when some of the head had come). Connections beyond
CRAFTAI_WEB_MAX_CONNECTIONS are answered 503 and closed as soon as they are accepted, so the gateway
holds no more descriptors than that.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from craftai.errors import CraftAiError
from craftai.web.errors import bad_request, error_response, gateway_error, raw_answer
from craftai_wire.vocabulary import GatewayReason


@dataclass(frozen=True)
class HeadRules:
    header_timeout_seconds: float
    max_header_bytes: int
    max_connections: int


def headers_too_large(size: int, limit: int) -> CraftAiError:
    return gateway_error(
        GatewayReason.HEADERS_TOO_LARGE,
        f"the request's line and headers are {size:,} bytes or more; the gateway reads at most {limit:,} "
        "(CRAFTAI_WEB_MAX_HEADER_BYTES)",
    )


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the bounds above (`rules`: set on a subclass by `protocol`)."""

    rules: ClassVar[HeadRules]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._cycle_before: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.rules.max_connections:
            self.connections.discard(self)
            refused = gateway_error(
                GatewayReason.TOO_MANY_CONNECTIONS,
                f"the gateway has {self.rules.max_connections:,} connections open, its bound "
                "(CRAFTAI_WEB_MAX_CONNECTIONS): try again in a moment",
            )
            transport.write(raw_answer(refused))
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._head_bytes += len(data)
        super().data_received(data)
        self._head_done()

    def on_response_complete(self) -> None:
        self._arm()  # the next request's head, if the connection is kept
        super().on_response_complete()
        self._head_done()

    def handle_websocket_upgrade(self, event: Any) -> None:
        """The head was read whole and the connection is a WebSocket's now (it stays counted among
        the connections): its head's deadline no longer applies."""
        self._disarm()
        super().handle_websocket_upgrade(event)

    def send_400_response(self, msg: str) -> None:
        """h11 could not read the request: its head too large (431), or not HTTP/1.1 (400)."""
        buffered = len(self.conn.trailing_data[0])
        limit = self.rules.max_header_bytes
        error = headers_too_large(buffered, limit) if buffered > limit else bad_request(f"not a request: {msg}")
        self.transport.write(raw_answer(error))
        self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._head_bytes = 0
        self._cycle_before = self.cycle
        self._head_timer = self.loop.call_later(self.rules.header_timeout_seconds, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_done(self) -> None:
        if self._head_timer is not None and self.cycle is not self._cycle_before:
            self._disarm()  # a request's head was read whole: its cycle began

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_bytes:
            slow = gateway_error(
                GatewayReason.REQUEST_TIMEOUT,
                f"the request's line and headers did not come within {self.rules.header_timeout_seconds:g} s "
                "(CRAFTAI_WEB_HEADER_TIMEOUT_SECONDS)",
            )
            self.transport.write(raw_answer(slow))
        self.transport.close()


def protocol(rules: HeadRules) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's `http` setting, with these rules."""
    return type("Guarded", (GuardedProtocol,), {"rules": rules})


class HeadLimit:
    """ASGI middleware: a request whose line and headers together pass the limit is answered 431
    (h11 refuses a head that long only while it is incomplete: one that arrives whole in a read
    is parsed, and refused here)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
            size += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.limit:
                await error_response(headers_too_large(size, self.limit))(scope, receive, send)
                return
        await self.app(scope, receive, send)
