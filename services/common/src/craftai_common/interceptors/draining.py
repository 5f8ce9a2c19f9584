"""A stopping server: while it drains, new calls from apps are refused (UNAVAILABLE /
SHUTTING_DOWN, retry elsewhere); calls between the services still pass, as the calls in progress
need them (craftai_common.server waits for those to finish)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from craftai_common.errors import ServiceError
from craftai_common.interceptors.base import Interceptor, refuse
from craftai_common.interceptors.call import Call, Context
from craftai_common.interceptors.limits import RETRY_AFTER_SECONDS
from craftai_wire.vocabulary import Reason


class Draining(Interceptor):
    """After authentication: it needs to know whether the caller is one of the services."""

    def __init__(self) -> None:
        self.on = False

    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        if self.on and not call.internal:
            await refuse(
                call,
                context,
                ServiceError(
                    grpc.StatusCode.UNAVAILABLE,
                    Reason.SHUTTING_DOWN,
                    "the server is shutting down and takes no new requests; retry in a moment "
                    "(on another replica if there is one)",
                    retry_after=RETRY_AFTER_SECONDS,
                ),
            )
        yield
