"""The gateway every RPC goes through (docs/SECURITY.md, OBSERVABILITY.md): one interceptor per
concern, composed in this order (each wraps the next; each module says what it checks and why):

1. request_log.py: the request id (made when absent), returned in the trailing metadata; the call
   timed, counted and logged once, whatever answered it;
2. authentication.py: the app id and the app's key (UNAUTHENTICATED); the caller's tenant set;
3. draining.py: while the server stops, new calls from apps refused (UNAVAILABLE / SHUTTING_DOWN);
4. string_bounds.py: every string of the request at most MAX_STRING characters
   (INVALID_ARGUMENT / FIELD_TOO_LONG);
5. admission.py: calls in progress per app, of the wildcard key's apps together, per service, and
   between the services (RESOURCE_EXHAUSTED / TOO_MANY_REQUESTS with a google.rpc.RetryInfo);
6. open_streams.py: health and reflection, which need no key: their streams bounded in number;
7. time_limits.py: the call's time limit, and a stream whose client stopped reading, ended by
   one watchdog (DEADLINE_EXCEEDED / CALL_TIME_LIMIT).

They share what they learn of a call through one small `Call` (call.py); `base.py` wraps a
servicer method of any kind for each of them.
"""

from __future__ import annotations

import time

import grpc

from craftai_common.auth import KeyRing
from craftai_common.interceptors.admission import Admission
from craftai_common.interceptors.authentication import Authentication
from craftai_common.interceptors.draining import Draining
from craftai_common.interceptors.limits import Limits
from craftai_common.interceptors.open_streams import OpenStreams
from craftai_common.interceptors.request_log import RequestLog
from craftai_common.interceptors.string_bounds import MAX_STRING, StringBounds
from craftai_common.interceptors.time_limits import TimeLimits
from craftai_wire.metadata import REQUEST_ID_PATTERN

__all__ = ["MAX_STRING", "REQUEST_ID_PATTERN", "Gateway", "Limits"]


class Gateway:
    """The interceptors of one server (`interceptors`, in their order) and what the server asks of
    them as it stops: refuse new calls, wait for those in progress, stop the watchdog."""

    def __init__(self, keys: KeyRing, limits: Limits | None = None) -> None:
        self.keys = keys
        self.limits = limits or Limits()
        self._draining = Draining()
        self._admission = Admission(self.limits)
        self._open_streams = OpenStreams(self.limits)
        self._time_limits = TimeLimits(self.limits)
        self.interceptors: list[grpc.aio.ServerInterceptor] = [
            RequestLog(),
            Authentication(keys),
            self._draining,
            StringBounds(),
            self._admission,
            self._open_streams,
            self._time_limits,
        ]

    @property
    def draining(self) -> bool:
        return self._draining.on

    @property
    def in_flight(self) -> int:
        """Calls admitted and not finished."""
        return self._admission.in_flight

    def idle_seconds(self) -> float:
        """How long no call has been in progress (0 while one is)."""
        if self._admission.in_flight:
            return 0.0
        return time.monotonic() - self._admission.changed_at

    @property
    def open_streams(self) -> int:
        """Health and reflection streams open."""
        return self._open_streams.count

    def start_draining(self) -> None:
        """Refuse new calls from apps from now on (calls between the services still pass)."""
        self._draining.on = True

    async def wait_idle(self, seconds: float) -> bool:
        """Wait until no call is in progress, at most `seconds`; True when idle."""
        return await self._admission.wait_idle(seconds)

    async def close(self) -> None:
        """Stop the watchdog."""
        await self._time_limits.close()
