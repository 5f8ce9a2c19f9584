"""Errors as gRPC status codes with plain-words messages and google.rpc details.

Every error a service raises on purpose is a `ServiceError`; `handle_errors` turns it into a
status with `ErrorInfo` (domain, reason, metadata) and, for bad requests, `BadRequest` field
violations, so that users read the message and programs read the reason.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, ParamSpec, TypeVar, cast

import grpc
from google.rpc import code_pb2
from grpc_status import rpc_status

from craftai_wire.details import ErrorDetails, pack
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.errors")


SHOWN_CHARACTERS = 64


def shown(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    """`text` as an error message may echo it: quoted, at most `limit` characters of it (a request's
    strings are the caller's: echoed whole, a long one would make the status too large to send)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text):,} characters)"


class ServiceError(Exception):
    """An error answered to the caller as a gRPC status."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: Reason,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[tuple[str, str]] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.metadata = dict(metadata or {})
        self.violations = list(violations)
        self.retry_after = retry_after  # seconds, sent as google.rpc.RetryInfo

    def to_status(self) -> grpc.Status:
        details = ErrorDetails(str(self.reason), self.metadata, self.violations, self.retry_after)
        code_value: int = self.code.value[0]
        return cast(grpc.Status, rpc_status.to_status(pack(code_value, self.message, details)))


def invalid_argument(reason: Reason, message: str, field: str | None = None, **metadata: str) -> ServiceError:
    violations = [(field, message)] if field else []
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, reason, message, metadata=metadata, violations=violations)


def failed_precondition(reason: Reason, message: str, **metadata: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.FAILED_PRECONDITION, reason, message, metadata=metadata)


def not_found(reason: Reason, message: str, **metadata: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.NOT_FOUND, reason, message, metadata=metadata)


def unavailable(reason: Reason, message: str, **metadata: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.UNAVAILABLE, reason, message, metadata=metadata)


def resource_exhausted(
    reason: Reason, message: str, *, retry_after: float | None = None, **metadata: str
) -> ServiceError:
    return ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED, reason, message, metadata=metadata, retry_after=retry_after)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: ServiceError) -> NoReturn:
    """Answer the error; trailing metadata already set (the request id) is kept beside its details.

    The error, and the one being handled (what failed, which the abort's own error is chained to),
    let go of their tracebacks first: their frames hold the request's locals, a decoded picture
    among them, and gRPC keeps the aborted call's error for as long as it keeps the call, which
    outlives the answer. A picture held that way would be counted against the decode budget, and
    kept in memory, long after its request was answered."""
    status = error.to_status()
    kept = tuple(context.trailing_metadata() or ())
    let_go(error)
    let_go(sys.exception())
    await context.abort(status.code, status.details, kept + tuple(status.trailing_metadata))
    raise AssertionError("abort returned")  # pragma: no cover


def let_go(error: BaseException | None) -> None:
    """Drop the tracebacks of `error` and of every error it was raised from or while handling."""
    waiting = [error]
    seen: set[int] = set()
    while waiting:
        current = waiting.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        waiting += [current.__cause__, current.__context__]


def _internal(exc: BaseException) -> ServiceError:
    log.exception("unexpected error", exc_info=exc)
    return ServiceError(
        grpc.StatusCode.INTERNAL,
        Reason.INTERNAL,
        f"internal error ({type(exc).__name__}); the server log has the details",
    )


P = ParamSpec("P")
R = TypeVar("R")


def handle_errors(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate a unary servicer method: ServiceError -> status; anything else -> INTERNAL."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        context = cast(grpc.aio.ServicerContext[Any, Any], args[-1])
        try:
            return await method(*args, **kwargs)
        except ServiceError as error:
            await abort(context, error)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:
            await abort(context, _internal(exc))

    return wrapper


def handle_stream_errors(method: Callable[P, AsyncIterator[R]]) -> Callable[P, AsyncIterator[R]]:
    """Decorate a server-streaming servicer method the same way."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[R]:
        context = cast(grpc.aio.ServicerContext[Any, Any], args[-1])
        try:
            async for item in method(*args, **kwargs):
                yield item
        except ServiceError as error:
            await abort(context, error)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:
            await abort(context, _internal(exc))

    return wrapper


def code_name(code: int) -> str:
    return cast(str, code_pb2.Code.Name(code))
