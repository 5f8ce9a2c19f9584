"""A picture kept on the server for prompts (image.segment sessions), re-opened with the kept
bytes when the server has forgotten it or the replica that kept it is gone: the session's state
and its methods (ops, craftai.methods) written once; `SegmentSession` runs them on the blocking
transport, `AsyncSegmentSession` on the asyncio one.

A session lives on the infer replica that opened it, which its id names (`replica`): its prompts,
SegmentEverything and CloseSession go there (craftai.replicas), so the encoder runs once per
picture however many replicas share the work. Opening goes to whichever replica gRPC picks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf.message import Message

from craftai.calls import (
    CLOSE_SESSION,
    OPEN_SESSION,
    SEGMENT,
    SEGMENT_EVERYTHING,
    Stream,
    everything_request,
    open_session_request,
    segment_request,
)
from craftai.calls import mask_output as mask_request
from craftai.calls import prompts as prompt_messages
from craftai.errors import CraftAiError
from craftai.methods import Op, awaiting_on, blocking_on, result, unary
from craftai.outputs import (
    EverythingOutput,
    MaskFormat,
    MaskInput,
    PointLike,
    Prompt,
    SegmentOutput,
    everything_output,
    segment_output,
)
from craftai.replicas import ReplicaLostError, replica_of
from craftai.transport import ProgressCallback, Transport, new_request_id
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import Reason

if TYPE_CHECKING:
    from craftai.transport_aio import AsyncTransport

AnswerT = TypeVar("AnswerT", bound=Message)


def forgotten(error: CraftAiError) -> bool:
    """The server no longer has the session (evicted, idle too long, closed, it restarted, or the
    replica that kept it is gone or draining): open it again with the picture, then prompt."""
    if isinstance(error, ReplicaLostError):
        return True
    return error.code == grpc.StatusCode.NOT_FOUND and error.reason == Reason.SESSION_NOT_FOUND


class SessionState:
    """What a session knows of itself: the kept picture, the route answered first, and what the
    last opening reported. Transport-free, so that a session of any client keeps the same state."""

    def __init__(self, picture: bytes | None, recipe: str, engine: str, session_id: str = "") -> None:
        self._picture = picture  # None: resumed by its id alone (`resume_session`), not re-opened
        self._recipe = recipe
        self._engine = engine
        self.session_id = session_id
        self.width = 0
        self.height = 0
        self.device = ""
        self.idle_seconds = 0.0
        self.timing_ms: dict[str, float] = {}
        self.notices: list[str] = []  # notices of the last opening (e.g. FELL_BACK_TO_CPU)
        self.reopened = 0  # how many times the server had forgotten it and it was opened again

    @property
    def replica(self) -> str:
        """The infer replica that keeps the session, as its id names it ("" when not open)."""
        return replica_of(self.session_id)

    @property
    def recipe(self) -> str:
        return self._recipe

    @property
    def engine(self) -> str:
        return self._engine

    def _open_request(self) -> infer_pb2.OpenSessionRequest:
        if self._picture is None:
            raise ValueError("this session was resumed by its id without its picture: it cannot be opened again")
        return open_session_request(self._picture, self._recipe, self._engine)

    def _opened(self, result: infer_pb2.OpenSessionResult) -> None:
        """Keep what the server answered, its route first (a re-opening asks for the same one)."""
        self.session_id = result.session_id
        self.width, self.height = result.width, result.height
        self._recipe, self._engine = result.route.recipe, result.route.engine
        self.device = result.device
        self.idle_seconds = result.idle_seconds
        self.timing_ms = dict(result.timing.stages_ms)


def open_op(
    session: SessionState, /, on_progress: ProgressCallback | None = None, *, request_id: str | None = None
) -> Op[None]:
    """(Re)open on the server with the kept picture bytes; the route answered first is kept."""
    session.notices = []
    request = session._open_request()
    answer = yield from result(OPEN_SESSION, request, on_progress, session.notices, request_id or new_request_id())
    session._opened(answer)


def _on_session(
    session: SessionState,
    /,
    rpc: Stream[Any, AnswerT],
    request: Callable[[], Any],
    on_progress: ProgressCallback | None,
    request_id: str,
) -> Op[tuple[AnswerT, list[str], bool]]:
    """A call on the session (its request made by `request` for the current id), opening it
    again once if the server forgot it: (result, notices, whether it was opened again). A session
    resumed by id alone (no picture kept) answers the server's SESSION_NOT_FOUND as it is, and so
    a lost replica (as SESSION_NOT_FOUND: its opener opens it again)."""
    reopened = False
    if not session.session_id:
        yield from open_op(session, on_progress, request_id=request_id)
        reopened = True
    while True:
        notices: list[str] = []
        try:
            answer = yield from result(rpc, request(), on_progress, notices, request_id, replica=session.replica)
        except CraftAiError as exc:
            if isinstance(exc, ReplicaLostError) and session._picture is None:
                raise exc.as_forgotten() from None
            if reopened or not forgotten(exc) or session._picture is None:
                raise
            yield from open_op(session, on_progress, request_id=request_id)  # evicted, expired, restarted, gone
            session.reopened += 1
            reopened = True
            continue
        return answer, notices, reopened


def segment_op(
    session: SessionState,
    /,
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
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
) -> Op[SegmentOutput]:
    """Masks for a prompt: points (x, y, foreground?) and/or a box (x0, y0, x1, y1) in picture
    pixels, optionally a previous answer's `low_res` to refine (asked with `low_res=True`: each
    mask's 256 KiB of logits come only then); best mask first. Several
    objects in one call: `prompts=[Prompt(box=...), Prompt(points=...)]` (decoded as one
    batch; `SegmentOutput.objects` has each one's masks). `single_mask_like_meta`: the one mask
    Meta's predictor answers (docs/API.md).

    `formats`: "png" (the default), "rle", "polygons", or several; `polygon_tolerance` in
    pixels (default 0: every corner, exactly the mask); `max_hole_area` / `max_sprinkle_area`:
    Meta's clean-up of small holes and islands, in low-res (256x256) pixels, off by default.

    A session the server no longer has (evicted, idle too long, or the server restarted: the
    SDK waits for it to come back) is opened again with the kept picture, then prompted."""
    asked = prompt_messages(points, box, mask_input, all_masks, prompts, single_mask_like_meta=single_mask_like_meta)
    output = mask_request(formats, polygon_tolerance, max_hole_area, max_sprinkle_area, low_res=low_res)
    request_id = request_id or new_request_id()
    answer, notices, reopened = yield from _on_session(
        session,
        SEGMENT,
        lambda: segment_request(session.session_id, asked, output),
        on_progress,
        request_id,
    )
    return segment_output(answer, notices, reopened, request_id)


def segment_everything_op(
    session: SessionState,
    /,
    *,
    formats: Iterable[MaskFormat] | MaskFormat | None = None,
    polygon_tolerance: float | None = None,
    on_progress: ProgressCallback | None = None,
    request_id: str | None = None,
    **options: float | int | bool,
) -> Op[EverythingOutput]:
    """Every object of the picture: Meta's automatic mask generator (a grid of single clicks,
    filtered and de-duplicated), with its parameters by name (points_per_side=32,
    points_per_batch=64, pred_iou_thresh=0.8, stability_score_thresh=0.95,
    stability_score_offset=1.0, mask_threshold=0.0, box_nms_thresh=0.7,
    min_mask_region_area=0). Masks as RLE unless `formats` says otherwise; progress ("points")
    after each batch of the decoder."""
    output = mask_request(formats, polygon_tolerance)
    request_id = request_id or new_request_id()
    answer, notices, _ = yield from _on_session(
        session,
        SEGMENT_EVERYTHING,
        lambda: everything_request(session.session_id, options, output),
        on_progress,
        request_id,
    )
    return everything_output(answer, notices, request_id)


def close_op(session: SessionState, /) -> Op[None]:
    """Forget the picture on the server (nothing happens if it is already gone, or the replica
    that kept it is)."""
    if session.session_id:
        request = infer_pb2.CloseSessionRequest(session_id=session.session_id)
        replica = session.replica
        session.session_id = ""
        with contextlib.suppress(ReplicaLostError):  # the replica went away with the session
            yield from unary(CLOSE_SESSION, request, replica=replica)


class SegmentSession(SessionState):
    """A picture kept on the server for prompts; close it (or use `with`) when done.

    The picture's bytes stay here, so a prompt after the server forgot the session (idle time,
    memory budget, restart) or after `close()` opens it again first. Not thread-safe: one app
    thread prompts one session at a time.
    """

    def __init__(
        self, transport: Transport, picture: bytes | None, recipe: str, engine: str, session_id: str = ""
    ) -> None:
        super().__init__(picture, recipe, engine, session_id)
        self.transport = transport

    open = blocking_on(open_op)
    segment = blocking_on(segment_op)
    segment_everything = blocking_on(segment_everything_op)
    close = blocking_on(close_op)

    def __enter__(self) -> SegmentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSegmentSession(SessionState):
    """SegmentSession for asyncio: the same methods, awaited; close it (or use `async with`).
    One task prompts one session at a time."""

    def __init__(
        self, transport: AsyncTransport, picture: bytes | None, recipe: str, engine: str, session_id: str = ""
    ) -> None:
        super().__init__(picture, recipe, engine, session_id)
        self.transport = transport

    open = awaiting_on(open_op)
    segment = awaiting_on(segment_op)
    segment_everything = awaiting_on(segment_everything_op)
    close = awaiting_on(close_op)

    async def __aenter__(self) -> AsyncSegmentSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
