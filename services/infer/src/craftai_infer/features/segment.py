"""image.segment: a picture encoded once, then prompts answered by the mask decoder alone.

open:   resolve -> load -> decode -> the route's ENCODE (batched where the route batches) -> kept
        in the session store under a new id (per app, LRU under a byte budget, idle expiry)
prompt: the prompt checked -> the app's session -> the route's DECODE (prompts with as many points
        batched together) -> 1-bit mask PNGs at the picture's size
once:   open and prompt in one call, keeping nothing
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from craftai_common.errors import Reason, not_found, resource_exhausted
from craftai_infer import pictures, prompts
from craftai_infer.features import run as runs
from craftai_infer.features.context import SEGMENT_BYTES_PER_PIXEL, FeatureContext
from craftai_infer.loader import LoadedRoute
from craftai_infer.pictures import Picture
from craftai_infer.pipelines.segment_sam import SamMasks, SamPrompt, prompt_points
from craftai_infer.routes import DECODE, ENCODE, DecodeRequest, SegmentRoute
from craftai_infer.sessions import BudgetTooSmallError, Session, SessionStore
from craftai_wire.v1 import infer_pb2

FEATURE = "image.segment"
OPEN_STAGES = ("decode", "encode")
PROMPT_STAGES = ("model", "png")
ONCE_STAGES = ("decode", "encode", "model", "png")


@dataclass(frozen=True)
class _Answer:
    """The masks of one prompt and the route that made them; `result` is the RPC's message."""

    loaded: LoadedRoute[Any]
    masks: list[infer_pb2.Mask]

    def result(self, run: runs.Run, width: int, height: int, session_id: str = "") -> infer_pb2.SegmentResult:
        return infer_pb2.SegmentResult(
            masks=self.masks,
            width=width,
            height=height,
            device=self.loaded.device,
            timing=run.timing(),
            session_id=session_id,
            route=self.loaded.ref,
        )


class SegmentFeature:
    def __init__(self, context: FeatureContext, sessions: SessionStore) -> None:
        self.context = context
        self.sessions = sessions

    # -- the three ways in -------------------------------------------------------------------

    async def open(self, request: infer_pb2.OpenSessionRequest, app: str, run: runs.Run) -> infer_pb2.OpenSessionResult:
        run.stages = OPEN_STAGES
        self.sessions.check_room(app)  # TOO_MANY_SESSIONS before any work
        loaded = await self._load(request.route, run)
        rgb = await self._decode(request.picture.data, run)
        embedding = await self._encode(loaded, rgb, run)
        height, width = rgb.shape[:2]
        try:
            opened = self.sessions.open(app, embedding, width=width, height=height, route=loaded, device=loaded.device)
        except BudgetTooSmallError as exc:
            raise resource_exhausted(
                Reason.LIMIT_REACHED,
                f"cannot keep this picture: {exc} (CRAFTAI_SESSION_BUDGET_BYTES); "
                "raise the budget, or use SegmentOnce, which keeps nothing",
            ) from exc
        return infer_pb2.OpenSessionResult(
            session_id=opened.session.id,
            width=width,
            height=height,
            route=loaded.ref,
            device=loaded.device,
            timing=run.timing(),
            idle_seconds=self.sessions.idle_seconds,
        )

    async def prompt(self, request: infer_pb2.SegmentRequest, app: str, run: runs.Run) -> infer_pb2.SegmentResult:
        run.stages = PROMPT_STAGES
        checked = prompts.check(request.prompt, self.context.settings.max_points)
        session = self._session(app, request.session_id)
        prompt = checked.within(session.width, session.height)
        answered = await self._answer(session.route, session.embedding, prompt, checked.all_masks, run)
        return answered.result(run, session.width, session.height, session.id)

    async def once(self, request: infer_pb2.SegmentOnceRequest, run: runs.Run) -> infer_pb2.SegmentResult:
        run.stages = ONCE_STAGES
        checked = prompts.check(request.prompt, self.context.settings.max_points)
        loaded = await self._load(request.route, run)
        rgb = await self._decode(request.picture.data, run)
        height, width = rgb.shape[:2]
        prompt = checked.within(width, height)
        embedding = await self._encode(loaded, rgb, run)
        answered = await self._answer(loaded, embedding, prompt, checked.all_masks, run)
        return answered.result(run, width, height)

    def close(self, request: infer_pb2.CloseSessionRequest, app: str) -> infer_pb2.CloseSessionResponse:
        return infer_pb2.CloseSessionResponse(closed=self.sessions.close(app, request.session_id))

    # -- the steps ---------------------------------------------------------------------------

    async def _load(self, route: Any, run: runs.Run) -> LoadedRoute[SegmentRoute]:
        resolved = await runs.resolve(self.context.routes, route, FEATURE)
        return await runs.load(self.context.routes, resolved, run)

    async def _decode(self, data: bytes, run: runs.Run) -> Picture:
        """RGB: transparency composited over white (colours under transparent pixels are arbitrary)."""
        c = self.context
        with run.stage("decode", "decoding the picture"):
            return await c.decoded(data, SEGMENT_BYTES_PER_PIXEL, rgb=True)

    async def _encode(self, loaded: LoadedRoute[SegmentRoute], rgb: Picture, run: runs.Run) -> Any:
        height, width = rgb.shape[:2]
        with run.stage("encode", f"encoding the {width}x{height} picture ({loaded.device})"):
            return await loaded.submit(ENCODE, rgb, run.notices)

    async def _answer(
        self, loaded: LoadedRoute[SegmentRoute], embedding: Any, prompt: SamPrompt, all_masks: bool, run: runs.Run
    ) -> _Answer:
        """The prompt's half of Segment and SegmentOnce: decode, then the mask PNGs."""
        with run.stage("model", f"decoding the mask ({loaded.device})"):
            request = DecodeRequest(embedding, prompt, all_masks)
            masks = await loaded.submit(DECODE, request, run.notices, prompt_points(prompt))
        with run.stage("png", "encoding the mask PNG"):
            answered = await self._masks(masks)
        return _Answer(loaded, answered)

    async def _masks(self, masks: SamMasks) -> list[infer_pb2.Mask]:
        """The answer's masks as 1-bit grayscale PNGs at the picture's size, best first (a bit per pixel
        is an eighth of the bytes to compress: the PNG is most of a click's time on a GPU machine)."""
        level = self.context.settings.png_compress_level

        def work() -> list[bytes]:
            return [pictures.encode_mask_png(np.asarray(m, dtype=np.bool_), level) for m in masks.masks]

        pngs = await self.context.on_cpu(work)
        return [
            infer_pb2.Mask(
                png=png,
                predicted_iou=float(masks.ious[k]),
                empty=bool(masks.empty[k]),
                selected_fraction=float(masks.fractions[k]),
                low_res=prompts.low_res_message(masks.low_res[k]),
            )
            for k, png in enumerate(pngs)
        ]

    def _session(self, app: str, session_id: str) -> Session:
        if not session_id:
            raise not_found(
                Reason.SESSION_NOT_FOUND, "the request names no session (session_id is empty); open one first"
            )
        session = self.sessions.get(app, session_id)
        if session is None:
            raise not_found(
                Reason.SESSION_NOT_FOUND,
                f"session {session_id} is not open for this app: it was closed, forgotten after "
                f"{self.sessions.idle_seconds:g} s without use, or evicted to keep within the session budget; "
                "open it again with the picture",
                session_id=session_id,
            )
        return session
