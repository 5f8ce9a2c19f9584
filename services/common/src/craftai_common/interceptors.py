"""The gateway every RPC goes through (docs/SECURITY.md, OBSERVABILITY.md).

In order, per call:

1. the app id (metadata `craftai-app-id`) must be present and well formed: UNAUTHENTICATED;
2. the app's key (metadata `craftai-app-key`) must be one of its keys (auth.KeyRing, compared in
   constant time): UNAUTHENTICATED, logged with the app id and the peer, never the key;
   `craftai-internal` (the services calling each other) needs the service key, nothing else;
3. while the server drains for a stop, new calls from apps are refused: UNAVAILABLE / SHUTTING_DOWN;
4. every string of the request is at most MAX_STRING characters: INVALID_ARGUMENT / FIELD_TOO_LONG;
5. limits (`Limits`), each RESOURCE_EXHAUSTED / TOO_MANY_REQUESTS with a google.rpc.RetryInfo:
   calls in progress per app id; of all app ids a `*` key admits, together (a caller holding a
   wildcard key can name any app id, so those ids share one limit and cannot crowd out the apps
   with keys of their own); of all apps per service; and between the services (their own limit,
   not counted against the apps', and served while draining: in-flight requests need them);
6. the request id (metadata `x-request-id`, made here when absent or unusable) is set for the
   logs and returned in the trailing metadata; the call is timed, counted and logged once.

Every call has a server-side time limit (`Limits.max_call_seconds`, longer for the methods named in
`long_calls`): past it the call is ended with DEADLINE_EXCEEDED / CALL_TIME_LIMIT. A stream whose
message has waited `stalled_write_seconds` (and a second per MiB of it) for its client to read it
is ended too (its slot, its
picture and everything its handler held are freed at once; gRPC keeps the unsent bytes until the
connection is renewed, see craftai_wire.channels.server_options). One watchdog task per gateway
enforces both.

grpc.health.v1 and reflection need no app id or key (probes, grpcurl); their streams (health
Watch, reflection) are bounded in number (`Limits.open_streams`) and in time like every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from craftai_common import observability as obs
from craftai_common.auth import INTERNAL_APP_ID, KeyRing
from craftai_common.errors import ServiceError, abort
from craftai_common.metadata import WILDCARD_TENANT, tenant_var
from craftai_wire.keys import local_key_file
from craftai_wire.metadata import (
    APP_ID_KEY,
    APP_ID_PATTERN,
    APP_KEY_KEY,
    OPEN_METHOD_PREFIXES,
    REQUEST_ID_KEY,
    REQUEST_ID_PATTERN,
)
from craftai_wire.vocabulary import Reason

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the type stubs
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Behaviour: TypeAlias = Callable[[Any, Context], Any]  # a servicer method (coroutine or async generator)
log = logging.getLogger("craftai.gateway")
access = logging.getLogger("craftai.access")
RETRY_AFTER_SECONDS = 1.0
MAX_STRING = 128  # characters of any string in a request (names and ids are far shorter)
SLOWEST_READ_BYTES_PER_SECOND = float(1 << 20)  # a client reading slower than this is taken as stalled
__all__ = ["MAX_STRING", "REQUEST_ID_PATTERN", "Gateway", "Limits"]


@dataclass(frozen=True)
class Limits:
    """What one server lets its callers hold at once, and for how long (0 turns a count off)."""

    per_app: int = 16  # calls in progress per app id
    wildcard: int = 32  # calls in progress of every app id a `*` key admits (or keys off), together
    per_service: int = 64  # calls in progress from apps, per service
    internal: int = 64  # calls in progress between the services
    open_streams: int = 64  # health Watch and reflection streams
    max_call_seconds: float = 900.0
    long_calls: Mapping[str, float] = field(default_factory=dict)  # full method name -> its own time limit
    stalled_write_seconds: float = 30.0

    def seconds_for(self, method: str) -> float:
        return self.long_calls.get(method, self.max_call_seconds)


def _metadata(context: Context, key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


@dataclass(eq=False)
class _Call:
    method: str
    service: str
    name: str
    request_id: str
    peer: str
    deadline: float  # time.monotonic() past which the call is ended
    task: asyncio.Task[Any] | None
    app: str = ""  # set once the app's key was checked
    internal: bool = False
    wildcard: bool = False
    started: float = field(default_factory=time.perf_counter)
    admitted: bool = False
    refused: str = ""
    error: BaseException | None = None
    writing_until: float | None = None  # a message is being written: by when the client must have taken it
    ended: str = ""  # "max_duration" or "stalled_write" once the watchdog ended it


class Gateway(grpc.aio.ServerInterceptor):
    """Owns the counters of one server (per app, wildcard, per service, internal, open streams),
    the drain flag, and the watchdog that ends calls past their time (`close` stops it)."""

    def __init__(self, keys: KeyRing, limits: Limits | None = None) -> None:
        self.keys = keys
        self.limits = limits or Limits()
        self.draining = False
        self.in_flight = 0
        self.open_streams = 0
        self._per_app: dict[str, int] = {}
        self._per_service: dict[str, int] = {}
        self._wildcard = 0
        self._internal = 0
        self._calls: set[_Call] = set()
        self._idle: asyncio.Event | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None:
            return handler
        if method.startswith(OPEN_METHOD_PREFIXES):
            return self._wrap_open(handler, method)
        return self._wrap(handler, method)

    # -- draining and the watchdog -------------------------------------------------------

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

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    def _watch(self, call: _Call) -> None:
        self._calls.add(call)
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watching(), name="gateway-watchdog")

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
                elif call.writing_until is not None and now > call.writing_until:
                    self._end(
                        call,
                        "stalled_write",
                        f"its client has not read its next message within {limits.stalled_write_seconds:g} s "
                        "(CRAFTAI_STALLED_WRITE_SECONDS) and a second per MiB of it",
                    )

    def _end(self, call: _Call, why: str, because: str) -> None:
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

    def _write_deadline(self, item: Any) -> float:
        """When the client must have taken `item`: CRAFTAI_STALLED_WRITE_SECONDS, and a second per
        MiB of it (a client reading a large answer over a slow link is slow, not stalled)."""
        size = item.ByteSize() if isinstance(item, Message) else 0
        return time.monotonic() + self.limits.stalled_write_seconds + size / SLOWEST_READ_BYTES_PER_SECOND

    def _time_limit_error(self, call: _Call) -> ServiceError:
        seconds = self.limits.seconds_for(call.method)
        return ServiceError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Reason.CALL_TIME_LIMIT,
            f"the call ran longer than {seconds:g} s, the longest this server lets one run "
            "(CRAFTAI_MAX_CALL_SECONDS); it was stopped",
            metadata={"seconds": f"{seconds:g}"},
        )

    async def _ended(self, call: _Call, context: Context) -> None:
        """After the watchdog cancelled a call that was not stalled: answer DEADLINE_EXCEEDED."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        await abort(context, self._time_limit_error(call))

    # -- one call ------------------------------------------------------------------------

    def _begin(self, method: str, context: Context) -> _Call:
        service, name = obs.split_method(method)
        request_id = _metadata(context, REQUEST_ID_KEY) or ""
        if not REQUEST_ID_PATTERN.match(request_id):
            request_id = uuid.uuid4().hex
        # The peer is read now: once a call has ended (a cancelled stream is finalised later),
        # asking grpc for it reads freed memory (seen as a segfault with grpcio 1.85).
        deadline = time.monotonic() + self.limits.seconds_for(method)
        call = _Call(method, service, name, request_id, context.peer(), deadline, asyncio.current_task())
        context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
        obs.request_id_var.set(request_id)
        obs.rpc_var.set(method)
        return call

    def _refusal(self, call: _Call, context: Context, request: Any) -> ServiceError | None:
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
        obs.app_id_var.set(app)
        verdict = self.keys.check(app, _metadata(context, APP_KEY_KEY))
        if not verdict.ok:
            return self._key_refusal(call, app, missing=verdict.problem == "missing")
        call.app, call.internal, call.wildcard = app, app == INTERNAL_APP_ID, verdict.wildcard
        tenant_var.set(WILDCARD_TENANT if verdict.wildcard else app)
        if self.draining and not call.internal:
            call.refused = Reason.SHUTTING_DOWN
            return ServiceError(
                grpc.StatusCode.UNAVAILABLE,
                Reason.SHUTTING_DOWN,
                "the server is shutting down and takes no new requests; retry in a moment "
                "(on another replica if there is one)",
                retry_after=RETRY_AFTER_SECONDS,
            )
        too_long = _long_string(request) if isinstance(request, Message) else None
        if too_long is not None:
            path, length = too_long
            call.refused = Reason.FIELD_TOO_LONG
            message = f"{path} is {length:,} characters long; at most {MAX_STRING} are accepted"
            return ServiceError(
                grpc.StatusCode.INVALID_ARGUMENT, Reason.FIELD_TOO_LONG, message, violations=[(path, message)]
            )
        return self._limit_refusal(call)

    def _key_refusal(self, call: _Call, app: str, *, missing: bool) -> ServiceError:
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
                f"(app_key=, or CRAFTAI_APP_KEY); a local `craftai serve` keeps its key in {local_key_file()}"
            )
        else:
            message = f"the key sent for app '{app}' is not one of its keys here: check the app's key"
        return ServiceError(grpc.StatusCode.UNAUTHENTICATED, Reason(call.refused), message, metadata={"app": app})

    def _limit_refusal(self, call: _Call) -> ServiceError | None:
        limits, app = self.limits, call.app
        if call.internal:
            if limits.internal and self._internal >= limits.internal:
                return self._too_many(
                    call,
                    f"the services already have {limits.internal} calls in progress between them, the most "
                    "this server takes (CRAFTAI_MAX_INTERNAL_REQUESTS)",
                    "internal",
                    limits.internal,
                )
            return None
        if limits.per_app and self._per_app.get(app, 0) >= limits.per_app:
            return self._too_many(
                call,
                f"app '{app}' already has {limits.per_app} requests in progress, the most one app may have "
                "(CRAFTAI_MAX_REQUESTS_PER_APP); retry when one has finished",
                "app",
                limits.per_app,
            )
        if call.wildcard and limits.wildcard and self._wildcard >= limits.wildcard:
            return self._too_many(
                call,
                f"the apps without a key of their own (admitted by a '*' key) already have {limits.wildcard} "
                "requests in progress together, the most they may have (CRAFTAI_MAX_WILDCARD_REQUESTS); retry "
                "when one has finished, or give the app a key of its own (craftai keys add <app id>)",
                "wildcard",
                limits.wildcard,
            )
        if limits.per_service and self._per_service.get(call.service, 0) >= limits.per_service:
            return self._too_many(
                call,
                f"{call.service} already has {limits.per_service} requests in progress, the most it takes "
                "at once (CRAFTAI_MAX_REQUESTS); retry in a moment",
                "service",
                limits.per_service,
            )
        return None

    @staticmethod
    def _too_many(call: _Call, message: str, scope: str, limit: int) -> ServiceError:
        call.refused = Reason.TOO_MANY_REQUESTS
        return ServiceError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            Reason.TOO_MANY_REQUESTS,
            message,
            metadata={"app": call.app, "limit": str(limit), "scope": scope},
            retry_after=RETRY_AFTER_SECONDS,
        )

    async def _admit(self, call: _Call, context: Context, request: Any) -> None:
        error = self._refusal(call, context, request)
        if error is not None:
            obs.REFUSED.labels(call.service, call.name, call.refused).inc()
            await abort(context, error)
        call.admitted = True
        self.in_flight += 1
        if call.internal:
            self._internal += 1
        else:
            self._per_app[call.app] = self._per_app.get(call.app, 0) + 1
            self._per_service[call.service] = self._per_service.get(call.service, 0) + 1
            self._wildcard += call.wildcard
        obs.IN_FLIGHT.labels(call.service, call.name).inc()
        self._watch(call)

    def _finish(self, call: _Call, context: Context) -> None:
        self._calls.discard(call)
        if call.admitted:
            self.in_flight -= 1
            if call.internal:
                self._internal -= 1
            else:
                _decrement(self._per_app, call.app)
                _decrement(self._per_service, call.service)
                self._wildcard -= call.wildcard
            obs.IN_FLIGHT.labels(call.service, call.name).dec()
            if self.in_flight == 0 and self._idle is not None:
                self._idle.set()
        code = _code_of(call.error, context)
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
        call.error = call.task = None  # no cycle through the exception's frames keeps a request's memory

    def _wrap(self, handler: Handler, method: str) -> Handler:
        if handler.unary_stream or handler.stream_stream:
            inner_stream = cast(Behaviour, handler.unary_stream or handler.stream_stream)

            async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
                call = self._begin(method, context)
                try:
                    await self._admit(call, context, request)
                    async for item in _produced(inner_stream(request, context)):
                        call.writing_until = self._write_deadline(item)
                        yield item
                        call.writing_until = None
                except asyncio.CancelledError as exc:
                    if call.ended != "max_duration":
                        call.error = exc
                        raise
                    await self._ended(call, context)  # DEADLINE_EXCEEDED, as the call's code
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
                await self._admit(call, context, request)
                return await inner_unary(request, context)
            except asyncio.CancelledError as exc:
                if call.ended != "max_duration":
                    call.error = exc
                    raise
                await self._ended(call, context)
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

    def _wrap_open(self, handler: Handler, method: str) -> Handler:
        """Health and reflection: no key; their streams bounded in number and time (unary: as they are)."""
        if not (handler.unary_stream or handler.stream_stream):
            return handler
        inner = cast(Behaviour, handler.unary_stream or handler.stream_stream)

        async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
            service, name = obs.split_method(method)
            deadline = time.monotonic() + self.limits.max_call_seconds
            call = _Call(method, service, name, "", context.peer(), deadline, asyncio.current_task())
            limit = self.limits.open_streams
            if limit and self.open_streams >= limit:
                obs.REFUSED.labels(service, name, Reason.TOO_MANY_STREAMS).inc()
                await abort(
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
            self.open_streams += 1
            self._watch(call)
            try:
                async for item in _produced(inner(request, context)):
                    call.writing_until = self._write_deadline(item)
                    yield item
                    call.writing_until = None
            except asyncio.CancelledError:
                if call.ended != "max_duration":
                    raise
                await self._ended(call, context)
            finally:
                self.open_streams -= 1
                self._calls.discard(call)
                call.task = None

        make = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
        return make(
            streaming,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


async def _produced(produced: Any) -> AsyncIterator[Any]:
    """The messages of a servicer method: an async generator's items, or none for a coroutine that
    writes with context.write itself."""
    if inspect.isasyncgen(produced):
        async for item in produced:
            yield item
    else:
        await produced


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


def _long_string(message: Message, prefix: str = "") -> tuple[str, int] | None:
    """The first string of `message` (fields, repeated fields, nested messages, maps) longer than
    MAX_STRING, as (its path, its length); None when every one is short enough.

    Only string and message fields are read: reading a bytes field copies it out of the message
    (a picture sent as its pixels is megabytes: ~5 ms of copying and fresh pages a request)."""
    for descriptor in message.DESCRIPTOR.fields:
        kind = descriptor.type
        if kind not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        name = descriptor.name
        if not descriptor.is_repeated and kind == FieldDescriptor.TYPE_MESSAGE and not message.HasField(name):
            continue
        value = getattr(message, name)
        entry = descriptor.message_type if kind == FieldDescriptor.TYPE_MESSAGE else None
        if entry is not None and entry.GetOptions().map_entry:
            values = [*value.keys(), *value.values()]  # a map: its keys and its values
        else:
            values = list(value) if descriptor.is_repeated else [value]
        for item in values:
            if isinstance(item, str) and len(item) > MAX_STRING:
                return prefix + name, len(item)
            if isinstance(item, Message) and (found := _long_string(item, prefix + name + ".")) is not None:
                return found
    return None


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
