"""A cutout fixed with clicks (cutout sessions: OpenCutout, RefineCutout): the session's state and
its methods (ops, craftai.methods) written once; `CutoutSession` runs them on the blocking
transport, `AsyncCutoutSession` on the asyncio one.

The server keeps the picture, its matte and its SAM embedding; each keep, remove or undo sends the
whole list of prompts so far and gets the outputs of the whole picture after all of them (the
answer is a function of the list, so undo is the list without its last prompt). The session lives
on the replica that opened it, which its id names (craftai.replicas); a session the server has
forgotten is opened again with the kept picture, then refined with the same list.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from craftai.calls import (
    CLOSE_SESSION,
    OPEN_CUTOUT,
    REFINE_CUTOUT,
    Colour,
    cutout_prompt,
    matte_options,
    matte_request,
    open_cutout_request,
)
from craftai.errors import CraftAiError
from craftai.methods import Op, awaiting_on, blocking_on, result, unary
from craftai.outputs import CutoutPrompt, MatteOutput, PointLike, matte_output
from craftai.pictures import Picture, read_picture
from craftai.replicas import ReplicaLostError, replica_of
from craftai.session import forgotten
from craftai.transport import ProgressCallback, Transport, new_request_id
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import CutoutAction

if TYPE_CHECKING:
    from craftai.transport_aio import AsyncTransport


class CutoutState:
    """What a cutout session knows of itself: its opening request (the picture's bytes in it), the
    prompts so far and the last answer. Transport-free, shared by both clients' sessions."""

    def __init__(self, request: infer_pb2.OpenCutoutRequest | None, session_id: str = "") -> None:
        self._request = request  # None: resumed by its id alone (`resume_cutout`), not opened again
        self.session_id = session_id
        self.prompts: list[infer_pb2.CutoutPrompt] = []
        self.result: MatteOutput | None = None  # the outputs after every prompt so far
        self.changed_pixels = 0  # pixels whose alpha the prompts changed
        self.segment_recipe = ""
        self.segment_engine = ""
        self.idle_seconds = 0.0
        self.reopened = 0  # how many times the server had forgotten it and it was opened again

    @property
    def replica(self) -> str:
        """The infer replica that keeps the session, as its id names it ("" when not open)."""
        return replica_of(self.session_id)

    def _answered(self, answer: infer_pb2.CutoutResult, notices: list[str], request_id: str) -> MatteOutput:
        self.session_id = answer.session_id
        self.changed_pixels = answer.changed_pixels
        self.segment_recipe, self.segment_engine = answer.segment_route.recipe, answer.segment_route.engine
        self.idle_seconds = answer.idle_seconds
        self.result = matte_output(answer.matte, notices, request_id)
        return self.result


def open_op(
    state: CutoutState, /, on_progress: ProgressCallback | None = None, *, request_id: str | None = None
) -> Op[MatteOutput]:
    """(Re)open on the server with the kept picture: the matte and the embedding made again; the
    answer is the cutout without any prompt."""
    if state._request is None:
        raise ValueError("this cutout was resumed by its id without its picture: it cannot be opened again")
    notices: list[str] = []
    request_id = request_id or new_request_id()
    answer = yield from result(OPEN_CUTOUT, state._request, on_progress, notices, request_id)
    return state._answered(answer, notices, request_id)


def _refined(state: CutoutState, on_progress: ProgressCallback | None, request_id: str) -> Op[MatteOutput]:
    """The outputs after `state.prompts`, opening the session again once if the server forgot it."""
    reopened = False
    while True:
        notices: list[str] = []
        request = infer_pb2.RefineCutoutRequest(session_id=state.session_id, prompts=state.prompts)
        try:
            answer = yield from result(REFINE_CUTOUT, request, on_progress, notices, request_id, replica=state.replica)
        except CraftAiError as exc:
            if isinstance(exc, ReplicaLostError) and state._request is None:
                raise exc.as_forgotten() from None
            if reopened or not forgotten(exc) or state._request is None:
                raise
            yield from open_op(state, on_progress, request_id=request_id)  # evicted, expired, restarted, gone
            state.reopened += 1
            reopened = True
            continue
        return state._answered(answer, notices, request_id)


def _prompted(
    state: CutoutState,
    action: CutoutAction,
    points: Iterable[PointLike],
    box: Sequence[float] | None,
    *,
    on_progress: ProgressCallback | None,
    request_id: str | None,
) -> Op[MatteOutput]:
    state.prompts.append(cutout_prompt(action, points, box))
    try:
        return (yield from _refined(state, on_progress, request_id or new_request_id()))
    except BaseException:
        state.prompts.pop()  # refused or failed: as if never asked
        raise


def keep_op(
    state: CutoutState,
    /,
    points: Iterable[PointLike] = (),
    box: Sequence[float] | None = None,
    *,
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
) -> Op[MatteOutput]:
    """Keep a region the matte missed: SAM's region for the points ((x, y) or (x, y, foreground))
    and/or box (x0, y0, x1, y1), in picture pixels, becomes subject. Answers (and keeps in
    `result`) the outputs of the whole picture after every prompt so far."""
    asked = _prompted(state, CutoutAction.KEEP, points, box, on_progress=on_progress, request_id=request_id)
    return (yield from asked)


def remove_op(
    state: CutoutState,
    /,
    points: Iterable[PointLike] = (),
    box: Sequence[float] | None = None,
    *,
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
) -> Op[MatteOutput]:
    """Remove a region the matte kept (the points and box as for `keep`): it becomes background."""
    return (
        yield from _prompted(state, CutoutAction.REMOVE, points, box, on_progress=on_progress, request_id=request_id)
    )


def refine_op(
    state: CutoutState,
    /,
    prompts: Sequence[CutoutPrompt],
    *,
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
) -> Op[MatteOutput]:
    """The outputs after exactly these prompts, in order (replacing the ones so far; [] is the
    cutout as opened): what a caller that keeps the list itself (a web page) sends each time."""
    built = [cutout_prompt(p.action, p.points, p.box) for p in prompts]
    before, state.prompts = state.prompts, built
    try:
        return (yield from _refined(state, on_progress, request_id or new_request_id()))
    except BaseException:
        state.prompts = before
        raise


def undo_op(
    state: CutoutState, /, *, on_progress: ProgressCallback | None = None, request_id: str | None = None
) -> Op[MatteOutput]:
    """Forget the last prompt: the answer is the one before it (ValueError when there is none)."""
    if not state.prompts:
        raise ValueError("there is no prompt to undo")
    last = state.prompts.pop()
    try:
        return (yield from _refined(state, on_progress, request_id or new_request_id()))
    except BaseException:
        state.prompts.append(last)
        raise


def close_op(state: CutoutState, /) -> Op[None]:
    """Forget the picture on the server (nothing happens if it is already gone)."""
    if state.session_id:
        request = infer_pb2.CloseSessionRequest(session_id=state.session_id)
        replica = state.replica
        state.session_id = ""
        with contextlib.suppress(ReplicaLostError):
            yield from unary(CLOSE_SESSION, request, replica=replica)


class CutoutSession(CutoutState):
    """A cutout kept on the server to fix with `keep`, `remove` and `undo`; close it (or use
    `with`) when done. Not thread-safe: one app thread refines one session at a time."""

    def __init__(self, transport: Transport, request: infer_pb2.OpenCutoutRequest | None, session_id: str = "") -> None:
        super().__init__(request, session_id)
        self.transport = transport

    open = blocking_on(open_op)
    keep = blocking_on(keep_op)
    remove = blocking_on(remove_op)
    refine = blocking_on(refine_op)
    undo = blocking_on(undo_op)
    close = blocking_on(close_op)

    def __enter__(self) -> CutoutSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncCutoutSession(CutoutState):
    """CutoutSession for asyncio: the same methods, awaited; close it (or use `async with`)."""

    def __init__(
        self, transport: AsyncTransport, request: infer_pb2.OpenCutoutRequest | None, session_id: str = ""
    ) -> None:
        super().__init__(request, session_id)
        self.transport = transport

    open = awaiting_on(open_op)
    keep = awaiting_on(keep_op)
    remove = awaiting_on(remove_op)
    refine = awaiting_on(refine_op)
    undo = awaiting_on(undo_op)
    close = awaiting_on(close_op)

    async def __aenter__(self) -> AsyncCutoutSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class CutoutOptions(TypedDict, total=False):
    """`open_cutout`'s options by name (`opening` says what each is)."""

    outputs: str | Iterable[str] | None
    naive: bool
    bg_color: Colour | None
    bg_blur: float | None
    bg_image: Picture | None
    threshold: float | None
    format: str | Mapping[str, str] | None
    png_level: int | None
    jpeg_quality: int | None
    part: str | None
    recipe: str | None
    engine: str | None
    segment_recipe: str | None
    segment_engine: str | None


def opening(
    picture: Picture,
    *,
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
    segment_recipe: str | None = None,
    segment_engine: str | None = None,
) -> infer_pb2.OpenCutoutRequest:
    """A cutout session's opening request: the picture and the outputs as `remove_background`
    takes them (the matte's `recipe` and `engine`), and the image.segment route (`segment_recipe`,
    `segment_engine`; else the catalogue's advice). Bad options raise ValueError."""
    options = matte_options(
        outputs=outputs,
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
    matte = matte_request(read_picture(picture), options, recipe, engine)
    return open_cutout_request(matte, segment_recipe, segment_engine)
