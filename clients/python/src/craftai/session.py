"""A picture kept on the server for prompts (image.segment sessions), re-opened with the kept
bytes when the server has forgotten it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import grpc

from craftai import calls
from craftai.errors import CraftAiError
from craftai.outputs import MaskInput, PointLike, SegmentOutput, segment_output
from craftai.transport import ProgressCallback, Transport, new_request_id
from craftai_wire.v1 import infer_pb2


def forgotten(error: CraftAiError) -> bool:
    """The server no longer has the session (evicted, idle too long, closed, or it restarted):
    open it again with the picture, then prompt."""
    return error.code == grpc.StatusCode.NOT_FOUND and error.reason == "SESSION_NOT_FOUND"


class SessionState:
    """What a session knows of itself: the kept picture, the route answered first, and what the
    last opening reported. Transport-free, so that a session of any client keeps the same state."""

    def __init__(self, picture: bytes, recipe: str, engine: str) -> None:
        self._picture = picture
        self._recipe = recipe
        self._engine = engine
        self.session_id = ""
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
        single_mask_like_meta: bool = False,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> SegmentOutput:
        """Masks for a prompt: points (x, y, foreground?) and/or a box (x0, y0, x1, y1) in picture
        pixels, optionally a previous answer's `low_res` to refine; best mask first.
        `single_mask_like_meta`: the one mask Meta's predictor answers (torch engine; docs/API.md).

        A session the server no longer has (evicted, idle too long, or the server restarted: the
        SDK waits for it to come back) is opened again with the kept picture, then prompted."""
        prompt = calls.prompt(list(points), box, mask_input, all_masks, single_mask_like_meta=single_mask_like_meta)
        request_id = request_id or new_request_id()
        reopened = False
        if not self.session_id:
            self.open(on_progress, request_id=request_id)
            reopened = True
        while True:
            request = infer_pb2.SegmentRequest(session_id=self.session_id, prompt=prompt)
            notices: list[str] = []
            try:
                result = self._transport.result(calls.SEGMENT, request, on_progress, notices, request_id)
            except CraftAiError as exc:
                if reopened or not forgotten(exc):
                    raise
                self.open(on_progress, request_id=request_id)  # evicted, expired or restarted: send it again
                self.reopened += 1
                reopened = True
                continue
            return segment_output(result, notices, reopened, request_id)

    def close(self) -> None:
        """Forget the picture on the server (nothing happens if it is already gone)."""
        if self.session_id:
            request = infer_pb2.CloseSessionRequest(session_id=self.session_id)
            self.session_id = ""
            self._transport.unary(calls.CLOSE_SESSION, request)

    def __enter__(self) -> SegmentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
