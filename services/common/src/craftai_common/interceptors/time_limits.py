"""Every call has a server-side time limit (`Limits.max_call_seconds`, longer for the methods named
in `long_calls`): past it the call is ended with DEADLINE_EXCEEDED / CALL_TIME_LIMIT. A stream
whose message has waited `stalled_write_seconds` (and a second per MiB of it) for its client to
read it is ended too: its slot, its picture and everything its handler held are freed at once
(gRPC keeps the unsent bytes until the connection is renewed, see
craftai_wire.channels.server_options). One watchdog task per server enforces both.

The innermost interceptor: only the calls admitted are watched, and health and reflection streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import Message

from craftai_common import observability as obs
from craftai_common.errors import ServiceError, abort
from craftai_common.interceptors.base import Interceptor
from craftai_common.interceptors.call import Call, Context
from craftai_common.interceptors.limits import Limits
from craftai_wire.metadata import OPEN_METHOD_PREFIXES
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.gateway")
SLOWEST_READ_BYTES_PER_SECOND = float(1 << 20)  # a client reading slower than this is taken as stalled


class TimeLimits(Interceptor):
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._calls: set[Call] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def guards(self, method: str, streaming: bool) -> bool:
        return streaming or not method.startswith(OPEN_METHOD_PREFIXES)  # health's Check is left as it is

    async def close(self) -> None:
        """Stop the watchdog."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        call.deadline = time.monotonic() + self.limits.seconds_for(call.method)
        self._calls.add(call)
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watching(), name="gateway-watchdog")
        try:
            yield
        except asyncio.CancelledError:
            if call.ended != "max_duration":
                raise
            task = asyncio.current_task()  # cancelled by the watchdog, not by the client
            if task is not None:
                task.uncancel()
            await abort(context, self._time_limit_error(call))  # DEADLINE_EXCEEDED, as the call's code
        finally:
            self._calls.discard(call)

    def sending(self, call: Call, item: Any) -> None:
        """When the client must have taken `item`: CRAFTAI_STALLED_WRITE_SECONDS, and a second per
        MiB of it (a client reading a large answer over a slow link is slow, not stalled). Its size
        is measured only if that first limit passes (`_late`): measuring serialises the message."""
        call.writing_until = time.monotonic() + self.limits.stalled_write_seconds
        call.writing = item

    def sent(self, call: Call) -> None:
        call.writing_until = None
        call.writing = None

    @staticmethod
    def _late(call: Call, now: float) -> bool:
        """Past the time for its message: after its size's second per MiB is added, once."""
        if call.writing_until is None or now <= call.writing_until:
            return False
        item, call.writing = call.writing, None
        if isinstance(item, Message):
            call.writing_until += item.ByteSize() / SLOWEST_READ_BYTES_PER_SECOND
        return now > call.writing_until

    async def _watching(self) -> None:
        limits = self.limits
        period = min(max(min(limits.stalled_write_seconds, limits.max_call_seconds) / 4, 0.05), 1.0)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for call in list(self._calls):
                if call.ended:
                    continue
                if now > call.deadline:
                    self._end(call, "max_duration", f"it ran longer than {limits.seconds_for(call.method):g} s")
                elif self._late(call, now):
                    self._end(
                        call,
                        "stalled_write",
                        f"its client has not read its next message within {limits.stalled_write_seconds:g} s "
                        "(CRAFTAI_STALLED_WRITE_SECONDS) and a second per MiB of it",
                    )

    @staticmethod
    def _end(call: Call, why: str, because: str) -> None:
        call.ended = why
        obs.ENDED.labels(call.service, call.name, why).inc()
        log.warning(
            "ended %s: %s",
            call.method,
            because,
            extra={"request_id": call.request_id, "app_id": call.app, "rpc": call.method, "peer": call.peer},
        )
        if call.task is not None:
            call.task.cancel()

    def _time_limit_error(self, call: Call) -> ServiceError:
        seconds = self.limits.seconds_for(call.method)
        return ServiceError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Reason.CALL_TIME_LIMIT,
            f"the call ran longer than {seconds:g} s, the longest this server lets one run "
            "(CRAFTAI_MAX_CALL_SECONDS); it was stopped",
            metadata={"seconds": f"{seconds:g}"},
        )
