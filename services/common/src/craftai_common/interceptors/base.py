"""One concern of the gateway as a grpc.aio server interceptor: what it does around a call is its
`around` (before the servicer, and after it whatever happened), written once for the four kinds
of method (unary or streaming, each way), which this module's wrapping handles."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeAlias, cast

import grpc

from craftai_common import observability as obs
from craftai_common.errors import ServiceError, abort
from craftai_common.interceptors.call import Call, Context, begin, end
from craftai_wire.metadata import OPEN_METHOD_PREFIXES

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the type stubs
Behaviour: TypeAlias = Callable[[Any, Context], Any]  # a servicer method (coroutine or async generator)


class Interceptor(grpc.aio.ServerInterceptor):
    """Wraps the methods it `guards` (by default every method but health and reflection, which need
    no key) with `around`, and a streamed message with `sending` and `sent`."""

    def guards(self, method: str, streaming: bool) -> bool:
        return not method.startswith(OPEN_METHOD_PREFIXES)

    def around(self, call: Call, context: Context, request: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """What happens before the call (refusing it with `refuse`) and after it."""
        return contextlib.nullcontext()

    def sending(self, call: Call, item: Any) -> None:
        """A message of a stream is about to be written."""

    def sent(self, call: Call) -> None:
        """The client has taken it."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or not self.guards(method, bool(handler.unary_stream or handler.stream_stream)):
            return handler
        return self._wrap(handler, method)

    def _wrap(self, handler: Handler, method: str) -> Handler:
        if handler.unary_stream or handler.stream_stream:
            inner_stream = cast(Behaviour, handler.unary_stream or handler.stream_stream)

            async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
                call, made = begin(method, context)
                try:
                    # the items closed here, whatever ends this stream: the interceptors within end first
                    async with (
                        self.around(call, context, request),
                        contextlib.aclosing(_produced(inner_stream(request, context))) as items,
                    ):
                        async for item in items:
                            self.sending(call, item)
                            yield item
                            self.sent(call)
                finally:
                    if made:
                        end(call)

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
            call, made = begin(method, context)
            try:
                async with self.around(call, context, request):
                    return await inner_unary(request, context)
            finally:
                if made:
                    end(call)

        make_unary = grpc.stream_unary_rpc_method_handler
        if handler.unary_unary:
            make_unary = grpc.unary_unary_rpc_method_handler
        return make_unary(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )


async def refuse(call: Call, context: Context, error: ServiceError) -> NoReturn:
    """Answer the call with `error` before it reaches the servicer, counted by its reason."""
    obs.REFUSED.labels(call.service, call.name, error.reason).inc()
    await abort(context, error)


async def _produced(produced: Any) -> AsyncGenerator[Any, None]:
    """The messages of a servicer method: an async generator's items, or none for a coroutine that
    writes with context.write itself."""
    if inspect.isasyncgen(produced):
        async with contextlib.aclosing(produced):  # what the method holds is let go with the call
            async for item in produced:
                yield item
    else:
        await produced
