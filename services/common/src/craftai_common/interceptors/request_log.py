"""Request ids, and each call timed, counted and logged once (docs/OBSERVABILITY.md).

The request id (metadata `x-request-id`, made here when absent or unusable) is set for the logs
and returned in the trailing metadata. The outermost interceptor: what the others refuse is
counted and logged here too, with the code it was answered with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc

from craftai_common import observability as obs
from craftai_common.interceptors.base import Interceptor
from craftai_common.interceptors.call import Call, Context, metadata
from craftai_wire.metadata import REQUEST_ID_KEY, REQUEST_ID_PATTERN

access = logging.getLogger("craftai.access")


class RequestLog(Interceptor):
    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        request_id = metadata(context, REQUEST_ID_KEY) or ""
        if not REQUEST_ID_PATTERN.match(request_id):
            request_id = uuid.uuid4().hex
        call.request_id = request_id
        context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
        obs.request_id_var.set(request_id)
        obs.rpc_var.set(call.method)
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._logged(call, _code_of(error, context))
            error = None  # no cycle through the exception's frames keeps a request's memory

    @staticmethod
    def _logged(call: Call, code: str) -> None:
        seconds = time.perf_counter() - call.started
        app = obs.app_label(call.app) if call.app else obs.UNAUTHENTICATED_LABEL
        obs.REQUESTS.labels(call.service, call.name, app, code).inc()
        obs.LATENCY.labels(call.service, call.name, app).observe(seconds)
        access.info(
            "%s %s in %.1f ms",
            call.method,
            code,
            seconds * 1000,
            extra={"code": code, "duration_ms": round(seconds * 1000, 3), "peer": call.peer},
        )


def _code_of(error: BaseException | None, context: Context) -> str:
    """The status code a finished call answered, as its name (OK, INVALID_ARGUMENT, ...)."""
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"  # the client went away (a stream closed before its end), or it was ended
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int) and code:
        return _NAMES.get(code, "UNKNOWN")
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        return "UNKNOWN"
    return "OK"


_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
