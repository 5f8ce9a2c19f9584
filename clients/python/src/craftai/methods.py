"""The SDK's methods, written once for every transport.

Each method is a generator (an `Op`): it builds its requests (craftai.calls), yields each call it
needs (`Call`: a unary call, or a stream read to its one result), is sent the answer (or thrown
the `CraftAiError`), and returns what the app gets (craftai.outputs). It does no I/O, so the
blocking client and the asyncio client run the very same code and differ only in the driver
(`run_blocking`, `run_async`): the transport differs, not the features.

`blocking` and `awaiting` make an op a method of a client (AiClient, AsyncAiClient: the op's own
signature and docstring); `blocking_on` and `awaiting_on` a method of a session (the op takes the
session's state first).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

from google.protobuf.message import Message

from craftai.calls import (
    GET_ROUTE_STATES,
    GET_RUNTIME,
    LIST_FEATURES,
    MATTE,
    RESOLVE_ROUTE,
    SEGMENT_ONCE,
    Colour,
    Stream,
    Unary,
    matte_options,
    matte_request,
    resolve_request,
    segment_once_request,
)
from craftai.calls import mask_output as mask_request
from craftai.calls import prompts as prompt_messages
from craftai.errors import CraftAiError
from craftai.installation import (
    FeatureInfo,
    ResolvedRoute,
    RouteStatus,
    Runtime,
    feature_info,
    resolved_route,
    route_status,
    runtime_info,
)
from craftai.outputs import MaskFormat, MaskInput, MatteOutput, PointLike, Prompt, SegmentOutput
from craftai.outputs import matte_output as _matte_output
from craftai.outputs import segment_output as _segment_output
from craftai.pictures import Picture, read_picture
from craftai.transport import ProgressCallback, new_request_id
from craftai_wire.v1 import catalogue_pb2, infer_pb2

P = ParamSpec("P")
T = TypeVar("T")
AnswerT = TypeVar("AnswerT", bound=Message)
OwnerT = TypeVar("OwnerT")


@dataclass(frozen=True)
class UnaryCall(Generic[AnswerT]):
    """A unary call to its answer (tried again under the transport's Retries); a session's call
    names the session's `replica` (craftai.replicas)."""

    rpc: Unary[Any, AnswerT]
    request: Message
    request_id: str | None = None
    replica: str = ""


@dataclass(frozen=True)
class StreamCall(Generic[AnswerT]):
    """A stream read to its one result: progress to `on_progress`, notices into `notices`."""

    rpc: Stream[Any, AnswerT]
    request: Message
    on_progress: ProgressCallback | None
    notices: list[str]
    request_id: str
    replica: str = ""


Call = UnaryCall[Any] | StreamCall[Any]
Op = Generator[Call, Any, T]


def unary(
    rpc: Unary[Any, AnswerT], request: Message, request_id: str | None = None, *, replica: str = ""
) -> Op[AnswerT]:
    """The answer of one unary call."""
    answer = yield UnaryCall(rpc, request, request_id, replica)
    assert isinstance(answer, rpc.answer)
    return answer


def result(
    rpc: Stream[Any, AnswerT],
    request: Message,
    on_progress: ProgressCallback | None,
    notices: list[str],
    request_id: str,
    *,
    replica: str = "",
) -> Op[AnswerT]:
    """The result of one stream (its progress and notices on the way)."""
    answer = yield StreamCall(rpc, request, on_progress, notices, request_id, replica)
    assert isinstance(answer, rpc.answer)
    return answer


class BlockingCalls(Protocol):
    """What the blocking driver needs of a transport."""

    def unary(
        self, rpc: Unary[Any, AnswerT], request: Any, request_id: str | None = None, *, replica: str = ""
    ) -> AnswerT: ...

    def result(
        self,
        rpc: Stream[Any, AnswerT],
        request: Any,
        on_progress: ProgressCallback | None,
        notices: list[str],
        request_id: str,
        *,
        replica: str = "",
    ) -> AnswerT: ...


class AsyncCalls(Protocol):
    """What the asyncio driver needs of a transport."""

    async def unary(
        self, rpc: Unary[Any, AnswerT], request: Any, request_id: str | None = None, *, replica: str = ""
    ) -> AnswerT: ...

    async def result(
        self,
        rpc: Stream[Any, AnswerT],
        request: Any,
        on_progress: ProgressCallback | None,
        notices: list[str],
        request_id: str,
        *,
        replica: str = "",
    ) -> AnswerT: ...


def run_blocking(transport: BlockingCalls, op: Op[T]) -> T:
    """Run an op to its value, each call on the blocking transport."""
    answer: Any = None
    error: CraftAiError | None = None
    while True:
        try:
            call = op.send(answer) if error is None else op.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            if isinstance(call, UnaryCall):
                answer = transport.unary(call.rpc, call.request, call.request_id, replica=call.replica)
            else:
                answer = transport.result(
                    call.rpc, call.request, call.on_progress, call.notices, call.request_id, replica=call.replica
                )
        except CraftAiError as exc:
            error = exc


async def run_async(transport: AsyncCalls, op: Op[T]) -> T:
    """Run an op to its value, each call awaited on the asyncio transport."""
    answer: Any = None
    error: CraftAiError | None = None
    while True:
        try:
            call = op.send(answer) if error is None else op.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            if isinstance(call, UnaryCall):
                answer = await transport.unary(call.rpc, call.request, call.request_id, replica=call.replica)
            else:
                answer = await transport.result(
                    call.rpc, call.request, call.on_progress, call.notices, call.request_id, replica=call.replica
                )
        except CraftAiError as exc:
            error = exc


def _signature(op: Callable[..., Any], method: Callable[..., Any], *, on_owner: bool, awaited: bool) -> None:
    """help() and inspect show the method as an app calls it: self first, the op's value returned."""
    signature = inspect.signature(op)
    parameters = list(signature.parameters.values())[1 if on_owner else 0 :]
    answer = str(signature.return_annotation).removeprefix("Op[").removesuffix("]")
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *parameters], return_annotation=f"Awaitable[{answer}]" if awaited else answer
    )


class HasBlocking(Protocol):
    @property
    def transport(self) -> BlockingCalls: ...


class HasAsync(Protocol):
    @property
    def transport(self) -> AsyncCalls: ...


def blocking(op: Callable[P, Op[T]]) -> Callable[Concatenate[HasBlocking, P], T]:
    """The op as a method of a blocking client (its signature and docstring)."""

    @functools.wraps(op)
    def method(self: HasBlocking, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_blocking(self.transport, op(*args, **kwargs))

    _signature(op, method, on_owner=False, awaited=False)
    return method


def awaiting(op: Callable[P, Op[T]]) -> Callable[Concatenate[HasAsync, P], Awaitable[T]]:
    """The op as a coroutine method of an asyncio client (its signature and docstring)."""

    @functools.wraps(op)
    async def method(self: HasAsync, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_async(self.transport, op(*args, **kwargs))

    _signature(op, method, on_owner=False, awaited=True)
    return method


HasBlockingT = TypeVar("HasBlockingT", bound=HasBlocking)
HasAsyncT = TypeVar("HasAsyncT", bound=HasAsync)


def blocking_on(op: Callable[Concatenate[Any, P], Op[T]]) -> Callable[Concatenate[HasBlockingT, P], T]:
    """The op as a method of a blocking session (the session is the op's first argument)."""

    @functools.wraps(op)
    def method(self: HasBlockingT, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_blocking(self.transport, op(self, *args, **kwargs))

    _signature(op, method, on_owner=True, awaited=False)
    return method


def awaiting_on(op: Callable[Concatenate[Any, P], Op[T]]) -> Callable[Concatenate[HasAsyncT, P], Awaitable[T]]:
    """The op as a coroutine method of an asyncio session (the session is the op's first argument)."""

    @functools.wraps(op)
    async def method(self: HasAsyncT, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_async(self.transport, op(self, *args, **kwargs))

    _signature(op, method, on_owner=True, awaited=True)
    return method


# -- the clients' methods -------------------------------------------------------------------


def features() -> Op[list[FeatureInfo]]:
    """The features the catalogue offers, with their recipes and routes."""
    answer = yield from unary(LIST_FEATURES, catalogue_pb2.ListFeaturesRequest())
    return [feature_info(f) for f in answer.features]


def status(feature: str = "", recipe: str = "") -> Op[list[RouteStatus]]:
    """The state of every route on this installation (missing, downloaded, prepared, ready)."""
    request = catalogue_pb2.GetRouteStatesRequest(feature=feature, recipe=recipe)
    answer = yield from unary(GET_ROUTE_STATES, request)
    return [route_status(r) for r in answer.routes]


def runtime() -> Op[Runtime]:
    """What the infer service runs on (device, GPU, engines) and its limits."""
    answer = yield from unary(GET_RUNTIME, infer_pb2.GetRuntimeRequest())
    return runtime_info(answer)


def resolve(feature: str, recipe: str | None = None, engine: str | None = None) -> Op[ResolvedRoute]:
    """The route the services would use on the infer service's machine (engine advice: the
    catalogue asks the infer service what it runs on; `reason` says what it found)."""
    answer = yield from unary(RESOLVE_ROUTE, resolve_request(feature, recipe, engine))
    return resolved_route(answer)


def remove_background(
    picture: Picture,
    *,
    cutout: bool = False,
    outputs: str | Iterable[str] | None = None,
    naive: bool = False,
    bg_color: Colour | None = None,
    bg_blur: float | None = None,
    bg_image: Picture | None = None,
    threshold: float | None = None,
    format: str | Mapping[str, str] | None = None,
    png_level: int | None = None,
    jpeg_quality: int | None = None,
    part: str | None = None,
    recipe: str | None = None,
    engine: str | None = None,
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
) -> Op[MatteOutput]:
    """Remove the background of a PNG, JPEG or WebP picture (bytes or a path); one request.

    outputs: any of "matte" (8-bit grayscale, white = subject), "cutout" (RGBA; the subject's
    colours estimated so that hair and fur lose the old background's tint, or the picture's
    own with `naive=True`), "composite" (the subject over `bg_color` ("#rrggbb[aa]" or
    (r, g, b[, a])), a blur of the picture of `bg_blur` pixels, or `bg_image`, scaled to
    cover; white when none is given), "mask" (alpha > `threshold`, default 0.5) — as a list
    or "matte,cutout". Without `outputs`: the cutout; the composite instead when a background is
    given, the mask when a threshold is (`cutout=True` keeps the cutout beside them): the same
    default as the `craftai` command's and the HTTP API's (calls.default_outputs).
    format: "png" (default), "webp" (lossless), "jpeg" (the composite only, over an opaque
    background) or "raw" (the pixels as they are, no encoding on either side: for code that wants
    arrays; refused where they would not fit one message), or one per output ({"composite":
    "jpeg", "matte": "webp"}); `png_level` 0..9 (the server's default: 1, fast),
    `jpeg_quality` 1..100 (90).
    part: for a recipe whose mattes are of parts (u2net_cloth_seg: "upper", "lower" or "full"
    clothes), that part's alone; without it such a recipe answers every part's, stacked top to
    bottom (each output as tall as the picture times the number of parts), as rembg does. Asked
    of another recipe, the server refuses it.
    Returns each output asked as an `EncodedImage` (`result.cutout.data`; `result.cutout.array()`
    its pixels as numpy, raw or decoded; a raw one's `shape` says how its bytes lie); `matte_png`
    and `cutout_png` are the PNG bytes (b"" when not asked). Bad options raise ValueError.
    """
    options = matte_options(
        outputs=outputs,
        cutout=cutout,
        naive=naive,
        bg_color=bg_color,
        bg_blur=bg_blur,
        bg_image=read_picture(bg_image) if bg_image is not None else None,
        threshold=threshold,
        format=format,
        png_level=png_level,
        jpeg_quality=jpeg_quality,
        part=part,
    )
    request = matte_request(read_picture(picture), options, recipe, engine)
    notices: list[str] = []
    request_id = request_id or new_request_id()
    answer = yield from result(MATTE, request, on_progress, notices, request_id)
    return _matte_output(answer, notices, request_id)


def segment_once(
    picture: Picture,
    points: Iterable[PointLike] = (),
    box: Sequence[float] | None = None,
    mask_input: MaskInput = None,
    all_masks: bool = False,
    *,
    prompts: Sequence[Prompt] | None = None,
    formats: Iterable[MaskFormat] | MaskFormat | None = None,
    polygon_tolerance: float | None = None,
    max_hole_area: int = 0,
    max_sprinkle_area: int = 0,
    single_mask_like_meta: bool = False,
    low_res: bool = False,
    recipe: str | None = None,
    engine: str | None = None,
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
) -> Op[SegmentOutput]:
    """Picture and prompt(s) in one call; nothing is kept on the server (the encoder runs each
    time). The prompt and output arguments are SegmentSession.segment's."""
    request = segment_once_request(
        read_picture(picture),
        prompt_messages(points, box, mask_input, all_masks, prompts, single_mask_like_meta=single_mask_like_meta),
        recipe,
        engine,
        mask_request(formats, polygon_tolerance, max_hole_area, max_sprinkle_area, low_res=low_res),
    )
    notices: list[str] = []
    request_id = request_id or new_request_id()
    answer = yield from result(SEGMENT_ONCE, request, on_progress, notices, request_id)
    return _segment_output(answer, notices, request_id=request_id)
