"""How many calls a server takes at once (docs/SECURITY.md), each refused RESOURCE_EXHAUSTED /
TOO_MANY_REQUESTS with a google.rpc.RetryInfo past its limit (`Limits`):

- calls in progress per app id;
- of all app ids a `*` key admits, together (a caller holding a wildcard key can name any app id,
  so those ids share one limit and cannot crowd out the apps with keys of their own);
- of all apps, per service;
- between the services: their own limit, not counted against the apps'.

The calls admitted are the calls in progress that a stopping server waits for (`wait_idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from craftai_common import observability as obs
from craftai_common.errors import ServiceError
from craftai_common.interceptors.base import Interceptor, refuse
from craftai_common.interceptors.call import Call, Context
from craftai_common.interceptors.limits import RETRY_AFTER_SECONDS, Limits
from craftai_wire.vocabulary import Reason


class Admission(Interceptor):
    """After authentication (the counts are per app and kind of key); owns the counts of one server."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.in_flight = 0
        self._per_app: dict[str, int] = {}
        self._per_service: dict[str, int] = {}
        self._wildcard = 0
        self._internal = 0
        self._idle: asyncio.Event | None = None
        self.changed_at = time.monotonic()  # when a call last started or ended

    async def wait_idle(self, seconds: float) -> bool:
        """Wait until no call is in progress, at most `seconds`; True when idle."""
        if self.in_flight == 0:
            return True
        self._idle = self._idle or asyncio.Event()
        try:
            async with asyncio.timeout(seconds):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        error = self._refusal(call)
        if error is not None:
            await refuse(call, context, error)
        self._count(call, 1)
        try:
            yield
        finally:
            self._count(call, -1)

    def _count(self, call: Call, step: int) -> None:
        self.in_flight += step
        self.changed_at = time.monotonic()
        if call.internal:
            self._internal += step
        else:
            _add(self._per_app, call.app, step)
            _add(self._per_service, call.service, step)
            self._wildcard += step * call.wildcard
        obs.IN_FLIGHT.labels(call.service, call.name).inc(step)
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    def _refusal(self, call: Call) -> ServiceError | None:
        limits, app = self.limits, call.app
        if call.internal:
            if limits.internal and self._internal >= limits.internal:
                return _too_many(
                    call,
                    f"the services already have {limits.internal} calls in progress between them, the most "
                    "this server takes (CRAFTAI_MAX_INTERNAL_REQUESTS)",
                    "internal",
                    limits.internal,
                )
            return None
        if limits.per_app and self._per_app.get(app, 0) >= limits.per_app:
            return _too_many(
                call,
                f"app '{app}' already has {limits.per_app} requests in progress, the most one app may have "
                "(CRAFTAI_MAX_REQUESTS_PER_APP); retry when one has finished",
                "app",
                limits.per_app,
            )
        if call.wildcard and limits.wildcard and self._wildcard >= limits.wildcard:
            return _too_many(
                call,
                f"the apps without a key of their own (admitted by a '*' key) already have {limits.wildcard} "
                "requests in progress together, the most they may have (CRAFTAI_MAX_WILDCARD_REQUESTS); retry "
                "when one has finished, or give the app a key of its own (craftai keys add <app id>)",
                "wildcard",
                limits.wildcard,
            )
        if limits.per_service and self._per_service.get(call.service, 0) >= limits.per_service:
            return _too_many(
                call,
                f"{call.service} already has {limits.per_service} requests in progress, the most it takes "
                "at once (CRAFTAI_MAX_REQUESTS); retry in a moment",
                "service",
                limits.per_service,
            )
        return None


def _too_many(call: Call, message: str, scope: str, limit: int) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        Reason.TOO_MANY_REQUESTS,
        message,
        metadata={"app": call.app, "limit": str(limit), "scope": scope},
        retry_after=RETRY_AFTER_SECONDS,
    )


def _add(counts: dict[str, int], key: str, step: int) -> None:
    left = counts.get(key, 0) + step
    if left:
        counts[key] = left
    else:
        del counts[key]
