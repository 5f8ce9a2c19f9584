"""grpc.health.v1 and reflection need no app id or key (probes, grpcurl); their streams (health
Watch, reflection) are bounded in number (`Limits.open_streams`: RESOURCE_EXHAUSTED /
TOO_MANY_STREAMS), and in time like every call (time_limits.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from craftai_common.errors import ServiceError
from craftai_common.interceptors.base import Interceptor, refuse
from craftai_common.interceptors.call import Call, Context
from craftai_common.interceptors.limits import RETRY_AFTER_SECONDS, Limits
from craftai_wire.metadata import OPEN_METHOD_PREFIXES
from craftai_wire.vocabulary import Reason


class OpenStreams(Interceptor):
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.count = 0

    def guards(self, method: str, streaming: bool) -> bool:
        return streaming and method.startswith(OPEN_METHOD_PREFIXES)  # unary ones (Check) are left as they are

    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        limit = self.limits.open_streams
        if limit and self.count >= limit:
            await refuse(
                call,
                context,
                ServiceError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    Reason.TOO_MANY_STREAMS,
                    f"this server already has {limit} health or reflection streams open, the most it keeps "
                    "(CRAFTAI_MAX_OPEN_STREAMS); use Check, or retry later",
                    metadata={"limit": str(limit)},
                    retry_after=RETRY_AFTER_SECONDS,
                ),
            )
        self.count += 1
        try:
            yield
        finally:
            self.count -= 1
