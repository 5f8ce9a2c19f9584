"""A picture kept on the server for prompts (image.segment sessions), re-opened with the kept
bytes when the server has forgotten it or the replica that kept it is gone.

A session lives on the infer replica that opened it (`replica`, answered with the session): its
prompts, SegmentEverything and CloseSession go there (craftai.replicas), so the encoder runs once
per picture however many replicas share the work. Opening goes to whichever replica gRPC picks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from craftai import calls
from craftai.errors import CraftAiError
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
from craftai.replicas import ReplicaLostError
from craftai.transport import ProgressCallback, Transport, new_request_id
from craftai_wire.v1 import infer_pb2

AnswerT = TypeVar("AnswerT", bound=Message)


def forgotten(error: CraftAiError) -> bool:
    """The server no longer has the session (evicted, idle too long, closed, it restarted, or the
    replica that kept it is gone or draining): open it again with the picture, then prompt."""
    if isinstance(error, ReplicaLostError):
        return True
    return error.code == grpc.StatusCode.NOT_FOUND and error.reason == "SESSION_NOT_FOUND"


class SessionState:
    """What a session knows of itself: the kept picture, the route answered first, and what the
    last opening reported. Transport-free, so that a session of any client keeps the same state."""

    def __init__(self, picture: bytes, recipe: str, engine: str) -> None:
        self._picture = picture
        self._recipe = recipe
        self._engine = engine
        self.session_id = ""
        self.replica = ""  # the infer replica that keeps it (OpenSessionResult.replica)
        self.width = 0
        self.height = 0
        self.device = ""
        self.idle_seconds = 0.0
        self.timing_ms: dict[str, float] = {}
        self.notices: list[str] = []  # notices of the last opening (e.g. FELL_BACK_TO_CPU)
        self.reopened = 0  # how many times the server had forgotten it and it was opened again

    @property
    def recipe(self) -> str:
        return self._recipe

    @property
    def engine(self) -> str:
        return self._engine

    def _open_request(self) -> infer_pb2.OpenSessionRequest:
        return calls.open_session_request(self._picture, self._recipe, self._engine)

    def _opened(self, result: infer_pb2.OpenSessionResult) -> None:
        """Keep what the server answered, its route first (a re-opening asks for the same one)."""
        self.session_id = result.session_id
        self.replica = result.replica
        self.width, self.height = result.width, result.height
        self._recipe, self._engine = result.route.recipe, result.route.engine
        self.device = result.device
        self.idle_seconds = result.idle_seconds
        self.timing_ms = dict(result.timing.stages_ms)


class SegmentSession(SessionState):
    """A picture kept on the server for prompts; close it (or use `with`) when done.

    The picture's bytes stay here, so a prompt after the server forgot the session (idle time,
    memory budget, restart) or after `close()` opens it again first. Not thread-safe: one app
    thread prompts one session at a time.
    """

    def __init__(self, transport: Transport, picture: bytes, recipe: str, engine: str) -> None:
        super().__init__(picture, recipe, engine)
        self._transport = transport

    def open(self, on_progress: ProgressCallback | None = None, *, request_id: str | None = None) -> None:
        """(Re)open on the server with the kept picture bytes; the route answered first is kept."""
        self.notices = []
        result = self._transport.result(
            calls.OPEN_SESSION, self._open_request(), on_progress, self.notices, request_id or new_request_id()
        )
        self._opened(result)

    def segment(
        self,
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
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> SegmentOutput:
        """Masks for a prompt: points (x, y, foreground?) and/or a box (x0, y0, x1, y1) in picture
        pixels, optionally a previous answer's `low_res` to refine; best mask first. Several
        objects in one call: `prompts=[Prompt(box=...), Prompt(points=...)]` (decoded as one
        batch; `SegmentOutput.objects` has each one's masks). `single_mask_like_meta`: the one mask
        Meta's predictor answers (torch engine; docs/API.md).

        `formats`: "png" (the default), "rle", "polygons", or several; `polygon_tolerance` in
        pixels (default 1); `max_hole_area` / `max_sprinkle_area`: Meta's clean-up of small holes
        and islands, in low-res (256x256) pixels, off by default.

        A session the server no longer has (evicted, idle too long, or the server restarted: the
        SDK waits for it to come back) is opened again with the kept picture, then prompted."""
        asked = calls.prompts(points, box, mask_input, all_masks, prompts, single_mask_like_meta=single_mask_like_meta)
        output = calls.mask_output(formats, polygon_tolerance, max_hole_area, max_sprinkle_area)
        request_id = request_id or new_request_id()
        result, notices, reopened = self._call(
            calls.SEGMENT, lambda: calls.segment_request(self.session_id, asked, output), on_progress, request_id
        )
        return segment_output(result, notices, reopened, request_id)

    def segment_everything(
        self,
        *,
        formats: Iterable[MaskFormat] | MaskFormat | None = None,
        polygon_tolerance: float | None = None,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
        **options: float | int | bool,
    ) -> EverythingOutput:
        """Every object of the picture: Meta's automatic mask generator (a grid of single clicks,
        filtered and de-duplicated), with its parameters by name (points_per_side=32,
        points_per_batch=64, pred_iou_thresh=0.8, stability_score_thresh=0.95,
        stability_score_offset=1.0, mask_threshold=0.0, box_nms_thresh=0.7,
        min_mask_region_area=0). Masks as RLE unless `formats` says otherwise; progress ("points")
        after each batch of the decoder."""
        output = calls.mask_output(formats, polygon_tolerance)
        request_id = request_id or new_request_id()
        result, notices, _ = self._call(
            calls.SEGMENT_EVERYTHING,
            lambda: calls.everything_request(self.session_id, options, output),
            on_progress,
            request_id,
        )
        return everything_output(result, notices, request_id)

    def _call(
        self,
        rpc: calls.Stream[Any, AnswerT],
        request: Callable[[], Any],
        on_progress: ProgressCallback | None,
        request_id: str,
    ) -> tuple[AnswerT, list[str], bool]:
        """A call on the session (its request made by `request` for the current id), opening it
        again once if the server forgot it: (result, notices, whether it was opened again)."""
        reopened = False
        if not self.session_id:
            self.open(on_progress, request_id=request_id)
            reopened = True
        while True:
            notices: list[str] = []
            try:
                result = self._transport.result(rpc, request(), on_progress, notices, request_id, replica=self.replica)
            except CraftAiError as exc:
                if reopened or not forgotten(exc):
                    raise
                self.open(on_progress, request_id=request_id)  # evicted, expired, restarted, gone: send it again
                self.reopened += 1
                reopened = True
                continue
            return result, notices, reopened

    def close(self) -> None:
        """Forget the picture on the server (nothing happens if it is already gone, or the replica
        that kept it is)."""
        if self.session_id:
            request = infer_pb2.CloseSessionRequest(session_id=self.session_id)
            self.session_id = ""
            with contextlib.suppress(ReplicaLostError):  # the replica went away with the session
                self._transport.unary(calls.CLOSE_SESSION, request, replica=self.replica)

    def __enter__(self) -> SegmentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
