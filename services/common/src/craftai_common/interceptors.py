"""Server interceptors: every RPC but health and reflection must name a valid app id."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from craftai_common.errors import Reason, ServiceError
from craftai_common.metadata import APP_ID_KEY, APP_ID_PATTERN, OPEN_METHOD_PREFIXES

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the type stubs


def _refusal(details: grpc.HandlerCallDetails) -> ServiceError | None:
    method = details.method or ""
    if method.startswith(OPEN_METHOD_PREFIXES):
        return None
    values = [v for k, v in details.invocation_metadata or () if k == APP_ID_KEY]
    if not values:
        return ServiceError(
            grpc.StatusCode.UNAUTHENTICATED,
            Reason.MISSING_APP_ID,
            f"every request must carry the app id in the metadata key '{APP_ID_KEY}'",
        )
    value = values[0].decode() if isinstance(values[0], bytes) else str(values[0])
    if not APP_ID_PATTERN.match(value):
        return ServiceError(
            grpc.StatusCode.UNAUTHENTICATED,
            Reason.BAD_APP_ID,
            "the app id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return None


class AppIdInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        error = _refusal(handler_call_details)
        if handler is None or error is None:
            return handler
        return _denying_handler(handler, error)


def _denying_handler(handler: Handler, error: ServiceError) -> Handler:
    async def deny_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort_with_status(error.to_status())

    async def deny_stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await context.abort_with_status(error.to_status())
        yield  # pragma: no cover - makes this an async generator

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny_unary, **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(deny_unary, **kwargs)
    return grpc.stream_stream_rpc_method_handler(deny_stream, **kwargs)
