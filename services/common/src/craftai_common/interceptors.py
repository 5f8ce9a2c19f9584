"""The gateway every RPC but health and reflection goes through (docs/SECURITY.md, OBSERVABILITY.md).

In order, per call:

1. the app id (metadata `craftai-app-id`) must be present and well formed: UNAUTHENTICATED;
2. the app's key (metadata `craftai-app-key`) must be one of its keys (auth.KeyRing, compared in
   constant time): UNAUTHENTICATED, logged with the app id and the peer, never the key;
3. while the server drains for a stop, new calls are refused: UNAVAILABLE / SHUTTING_DOWN;
4. an app has at most CRAFTAI_MAX_REQUESTS_PER_APP calls in progress: RESOURCE_EXHAUSTED /
   TOO_MANY_REQUESTS with a google.rpc.RetryInfo, so that one app cannot take every worker;
5. the request id (metadata `x-request-id`, made here when absent or unusable) is set for the
   logs and returned in the trailing metadata; the call is timed, counted and logged once.

Calls between the services (app id `craftai-internal`, the service key) are not limited and are
served while draining: in-flight requests may need them to finish.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

import grpc

from craftai_common import observability as obs
from craftai_common.auth import INTERNAL_APP_ID, KeyRing
from craftai_common.errors import Reason, ServiceError, abort
from craftai_wire.metadata import APP_ID_KEY, APP_ID_PATTERN, APP_KEY_KEY, OPEN_METHOD_PREFIXES, REQUEST_ID_KEY

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the type stubs
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Behaviour: TypeAlias = Callable[[Any, Context], Any]  # a servicer method (coroutine or async generator)
log = logging.getLogger("craftai.gateway")
access = logging.getLogger("craftai.access")
REQUEST_ID_PATTERN = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces, at most 128
RETRY_AFTER_SECONDS = 1.0


def _metadata(context: Context, key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


@dataclass
class _Call:
    method: str
    service: str
    name: str
    request_id: str
    peer: str
    app: str = ""
    started: float = field(default_factory=time.perf_counter)
    admitted: bool = False
    refused: str = ""
    error: BaseException | None = None


class Gateway(grpc.aio.ServerInterceptor):
    """Owns the per-app counters, the drain flag and the in-flight count of one server."""

    def __init__(self, keys: KeyRing, *, max_requests_per_app: int = 0) -> None:
        self.keys = keys
        self.max_requests_per_app = max_requests_per_app
        self.draining = False
        self.in_flight = 0
        self._per_app: dict[str, int] = {}
        self._idle: asyncio.Event | None = None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        return self._wrap(handler, method)

    # -- draining ------------------------------------------------------------------------

    def start_draining(self) -> None:
        """Refuse new calls from apps from now on (calls between the services still pass)."""
        self.draining = True

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

    # -- one call ------------------------------------------------------------------------

    def _begin(self, method: str, context: Context) -> _Call:
        service, name = obs.split_method(method)
        request_id = _metadata(context, REQUEST_ID_KEY) or ""
        if not REQUEST_ID_PATTERN.match(request_id):
            request_id = uuid.uuid4().hex
        # The peer is read now: once a call has ended (a cancelled stream is finalised later),
        # asking grpc for it reads freed memory (seen as a segfault with grpcio 1.85).
        call = _Call(method, service, name, request_id, context.peer())
        context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
        obs.request_id_var.set(request_id)
        obs.rpc_var.set(method)
        return call

    def _refusal(self, call: _Call, context: Context) -> ServiceError | None:
        app = _metadata(context, APP_ID_KEY)
        if not app:
            call.refused = Reason.MISSING_APP_ID
            return ServiceError(
                grpc.StatusCode.UNAUTHENTICATED,
                Reason.MISSING_APP_ID,
                f"every request must carry the app id in the metadata key '{APP_ID_KEY}'",
            )
        if not APP_ID_PATTERN.match(app):
            call.refused = Reason.BAD_APP_ID
            return ServiceError(
                grpc.StatusCode.UNAUTHENTICATED,
                Reason.BAD_APP_ID,
                "the app id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        call.app = app
        obs.app_id_var.set(app)
        verdict = self.keys.check(app, _metadata(context, APP_KEY_KEY))
        if not verdict.ok:
            missing = verdict.problem == "missing"
            call.refused = Reason.MISSING_APP_KEY if missing else Reason.BAD_APP_KEY
            log.warning(
                "refused %s from app %s: %s app key",
                call.method,
                app,
                "no" if missing else "a wrong",
                extra={"peer": call.peer, "reason": call.refused},
            )
            if missing:
                message = (
                    f"app '{app}' sent no key (metadata '{APP_KEY_KEY}'): give the app's key to the SDK "
                    "(app_key=, or CRAFTAI_APP_KEY); a local `craftai serve` keeps its key in ~/.config/craftai/app.key"
                )
            else:
                message = f"the key sent for app '{app}' is not one of its keys here: check the app's key"
            return ServiceError(grpc.StatusCode.UNAUTHENTICATED, Reason(call.refused), message, metadata={"app": app})
        if app == INTERNAL_APP_ID:
            return None
        if self.draining:
            call.refused = Reason.SHUTTING_DOWN
            return ServiceError(
                grpc.StatusCode.UNAVAILABLE,
                Reason.SHUTTING_DOWN,
                "the server is shutting down and takes no new requests; retry in a moment "
                "(on another replica if there is one)",
                retry_after=RETRY_AFTER_SECONDS,
            )
        limit = self.max_requests_per_app
        if limit and self._per_app.get(app, 0) >= limit:
            call.refused = Reason.TOO_MANY_REQUESTS
            return ServiceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                Reason.TOO_MANY_REQUESTS,
                f"app '{app}' already has {limit} requests in progress, the most one app may have "
                "(CRAFTAI_MAX_REQUESTS_PER_APP); retry when one has finished",
                metadata={"app": app, "limit": str(limit)},
                retry_after=RETRY_AFTER_SECONDS,
            )
        return None

    async def _admit(self, call: _Call, context: Context) -> None:
        error = self._refusal(call, context)
        if error is not None:
            obs.REFUSED.labels(call.service, call.name, call.refused).inc()
            await abort(context, error)
        call.admitted = True
        self.in_flight += 1
        if call.app != INTERNAL_APP_ID:
            self._per_app[call.app] = self._per_app.get(call.app, 0) + 1
        obs.IN_FLIGHT.labels(call.service, call.name).inc()

    def _finish(self, call: _Call, context: Context) -> None:
        if call.admitted:
            self.in_flight -= 1
            if call.app != INTERNAL_APP_ID:
                left = self._per_app[call.app] - 1
                if left:
                    self._per_app[call.app] = left
                else:
                    del self._per_app[call.app]
            obs.IN_FLIGHT.labels(call.service, call.name).dec()
            if self.in_flight == 0 and self._idle is not None:
                self._idle.set()
        code = _code_of(call.error, context)
        seconds = time.perf_counter() - call.started
        app = obs.app_label(call.app or "-")
        obs.REQUESTS.labels(call.service, call.name, app, code).inc()
        obs.LATENCY.labels(call.service, call.name, app).observe(seconds)
        access.info(
            "%s %s in %.1f ms",
            call.method,
            code,
            seconds * 1000,
            extra={"code": code, "duration_ms": round(seconds * 1000, 3), "peer": call.peer},
        )

    def _wrap(self, handler: Handler, method: str) -> Handler:
        if handler.unary_stream or handler.stream_stream:
            inner_stream = cast(Behaviour, handler.unary_stream or handler.stream_stream)

            async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
                call = self._begin(method, context)
                try:
                    await self._admit(call, context)
                    produced = inner_stream(request, context)
                    if inspect.isasyncgen(produced):
                        async for item in produced:
                            yield item
                    else:
                        await produced
                except BaseException as exc:
                    call.error = exc
                    raise
                finally:
                    self._finish(call, context)

            make = grpc.stream_stream_rpc_method_handler
            if handler.unary_stream:
                make = grpc.unary_stream_rpc_method_handler
            return make(
                streaming,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )

        inner_unary = cast(Behaviour, handler.unary_unary or handler.stream_unary)

        async def unary(request: Any, context: Context) -> Any:
            call = self._begin(method, context)
            try:
                await self._admit(call, context)
                return await inner_unary(request, context)
            except BaseException as exc:
                call.error = exc
                raise
            finally:
                self._finish(call, context)

        make_unary = grpc.stream_unary_rpc_method_handler
        if handler.unary_unary:
            make_unary = grpc.unary_unary_rpc_method_handler
        return make_unary(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )


def _code_of(error: BaseException | None, context: Context) -> str:
    """The status code a finished call answered, as its name (OK, INVALID_ARGUMENT, ...)."""
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"  # the client went away (a stream closed before its end)
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int) and code:
        return _NAMES.get(code, "UNKNOWN")
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        return "UNKNOWN"
    return "OK"


_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
