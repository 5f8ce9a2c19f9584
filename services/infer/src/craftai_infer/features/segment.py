"""image.segment: a picture encoded once, then prompts answered by the mask decoder alone.

open:       resolve -> load -> decode -> the route's ENCODE (batched where the route batches) -> kept
            in the session store under a new id (per app, LRU under a byte budget, idle expiry)
prompt:     (interactive work; the others are bulk: craftai_infer.scheduling)
            the call's prompts (one object or several) and output options checked -> the app's
            session -> one DECODE for all of them (prompts with as many points share a decoder
            call, and calls arriving together batch) -> each mask in the formats asked
            (craftai_infer.masks: 1-bit PNG, RLE, polygons; box and area)
once:       open and prompt in one call, keeping nothing
everything: the automatic mask generator on a session (craftai_infer.pipelines.mask_generator):
            the grid's points through GRID a batch at a time, the route's `grid_ahead` of them
            queued so that the model's worker never waits for the event loop (a route that batches
            GRID takes those waiting in one call; progress after each batch; a cancelled call
            stops within `grid_ahead` batches), box NMS, the masks written (RLE unless asked)
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from craftai_common.errors import ServiceError, not_found, resource_exhausted
from craftai_common.metadata import tenant_var
from craftai_infer import masks as answers
from craftai_infer import prompts
from craftai_infer.features import run as runs
from craftai_infer.features.context import SEGMENT_BYTES_PER_PIXEL, FeatureContext
from craftai_infer.loader import LoadedRoute
from craftai_infer.pipelines import mask_formats, mask_generator
from craftai_infer.pipelines.mask_generator import Candidates
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.segment_sam import SamMasks, SamPrompt, prompt_points
from craftai_infer.routes import DECODE, ENCODE, GRID, DecodeRequest, GridRequest, SegmentRoute
from craftai_infer.scheduling import WorkClass, work_class_var
from craftai_infer.sessions import BudgetTooSmallError, Session, SessionStore
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import Reason

FEATURE = "image.segment"
# What a Segment call holds per pixel of its picture for each mask it answers, counted against the
# decode budget (craftai_infer.memory) before the decoder runs: the logits upscaled in float (4),
# the mask (1), its encodings and their copy in the message (at most ~1 for PNG or RLE of a
# mask, more only for pathological polygons, which the answer's size check catches).
MASK_BYTES_PER_PIXEL = 6
LOW_RES_BYTES = 4 * 256 * 256  # one mask's low-res logits, when asked
# Segment everything holds, beyond its answer: a grid call's working memory per point (the
# decoder's activations and its three low-res masks: ~2 MiB a point measured on the CPU), and one
# mask upscaled at a time to the picture's size for its stability score and RLE.
GRID_BYTES_PER_POINT = 3 << 20
GRID_BYTES_PER_PIXEL = 6
OPEN_STAGES = ("decode", "encode")
EVERYTHING_STAGES = ("model", "select", "masks")


def _prompt_of(request: infer_pb2.SegmentRequest | infer_pb2.SegmentOnceRequest) -> infer_pb2.Prompt | None:
    return request.prompt if request.HasField("prompt") else None


@dataclass(frozen=True)
class _Answer:
    """The RPC's message with the prompts' masks written in it, and the route that made them;
    `result` completes it."""

    loaded: LoadedRoute[Any]
    message: infer_pb2.SegmentResult

    def result(self, run: runs.Run, width: int, height: int, session_id: str = "") -> infer_pb2.SegmentResult:
        message = self.message
        message.width, message.height = width, height
        message.device, message.session_id = self.loaded.device, session_id
        message.timing.CopyFrom(run.timing())
        message.route.CopyFrom(self.loaded.ref)
        return message


def _answerable(loaded: LoadedRoute[SegmentRoute], checked: Sequence[prompts.Checked]) -> None:
    """A prompt the route cannot answer is refused before any model work."""
    for c in checked:
        if c.single_mask_like_meta and not loaded.route.capabilities.single_mask_like_meta:
            raise prompts.like_meta_refused(loaded.ref.engine, c.where)


class SegmentFeature:
    """`replica` names this process in every session it opens: the SDK sends the session's later
    calls to that replica (docs/DEPLOY.md, Scaling)."""

    def __init__(self, context: FeatureContext, sessions: SessionStore, replica: str = "") -> None:
        self.context = context
        self.sessions = sessions
        self.replica = replica

    # -- the three ways in -------------------------------------------------------------------

    async def open(self, request: infer_pb2.OpenSessionRequest, app: str, run: runs.Run) -> infer_pb2.OpenSessionResult:
        run.stages = OPEN_STAGES
        tenant = tenant_var.get() or app
        self.sessions.check_room(app, tenant)  # TOO_MANY_SESSIONS before any work
        loaded = await self.load(request.route, run)
        rgb = await self._decode(request.picture.data, loaded, run)
        embedding = await self._encode(loaded, rgb, run)
        height, width = rgb.shape[:2]
        try:
            opened = self.sessions.open(
                app, embedding, width=width, height=height, route=loaded, device=loaded.device, tenant=tenant
            )
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
            replica=self.replica,
        )

    async def prompt(self, request: infer_pb2.SegmentRequest, app: str, run: runs.Run) -> infer_pb2.SegmentResult:
        work_class_var.set(WorkClass.INTERACTIVE)  # a click: before any bulk work (the rest is bulk)
        checked, output = self._check(request)
        run.stages = ("model", output.stage)
        session = self.session(app, request.session_id)
        loaded = run.hold(session.route)
        _answerable(loaded, checked)
        asked = [(c.within(session.width, session.height), c.all_masks) for c in checked]
        answered = await self._answer(loaded, session.embedding, asked, output, run)
        return answered.result(run, session.width, session.height, session.id)

    async def once(self, request: infer_pb2.SegmentOnceRequest, run: runs.Run) -> infer_pb2.SegmentResult:
        checked, output = self._check(request)
        run.stages = ("decode", "encode", "model", output.stage)
        loaded = await self.load(request.route, run)
        _answerable(loaded, checked)
        rgb = await self._decode(request.picture.data, loaded, run)
        height, width = rgb.shape[:2]
        asked = [(c.within(width, height), c.all_masks) for c in checked]
        embedding = await self._encode(loaded, rgb, run)
        answered = await self._answer(loaded, embedding, asked, output, run)
        return answered.result(run, width, height)

    async def everything(
        self, request: infer_pb2.SegmentEverythingRequest, app: str, run: runs.Run
    ) -> infer_pb2.SegmentEverythingResult:
        s = self.context.settings
        settings = answers.check_everything(request.options, s.max_points_per_side, s.max_points_per_batch)
        output = answers.check_output(request.output, answers.RLE, cleanup_allowed=False)
        run.stages = EVERYTHING_STAGES
        session = self.session(app, request.session_id)
        height, width = session.height, session.width
        points = mask_generator.grid_points(settings.points_per_side, height, width)
        loaded = run.hold(session.route)
        if not settings.multimask_output and not loaded.route.capabilities.single_mask_like_meta:
            raise prompts.like_meta_refused(loaded.ref.engine, "options", "multimask_output", Reason.BAD_OPTIONS)
        limit = s.max_message_bytes  # the masks found before de-duplication are bounded by what one answer carries
        reserve = settings.points_per_batch * GRID_BYTES_PER_POINT + width * height * GRID_BYTES_PER_PIXEL + 3 * limit
        what = f"segment everything on a {width}x{height} picture ({settings.points_per_batch} points a call)"
        smaller = "it would fit with fewer points a call (points_per_batch) or a smaller picture"
        async with self.context.admitted(reserve, what, smaller=smaller):
            stage = f"decoding {len(points)} points, {settings.points_per_batch} a call ({loaded.device})"
            with run.stage("model", stage):
                chunks = mask_generator.batches(points, settings.points_per_batch)
                found = await self._grid(loaded, session, chunks, settings, run, limit=limit)
            candidates = Candidates.concat(found)
            del found
            with run.stage("select", f"removing duplicates among {len(candidates)} masks"):
                kept = await self.context.on_cpu(mask_generator.select, candidates, settings)
            result = run.result(infer_pb2.SegmentEverythingResult)
            with run.stage("masks", f"writing {len(kept)} masks"):
                await self.context.on_cpu(self._write_candidates, kept, output, height, width, result)
        result.width, result.height, result.device, result.session_id = width, height, loaded.device, session.id
        result.route.CopyFrom(loaded.ref)
        result.points, result.candidates = len(points), len(candidates)
        result.timing.CopyFrom(run.timing())
        runs.check_size(
            result,
            self.context.settings.max_message_bytes,
            "the masks",
            "ask for RLE rather than PNGs or polygons, or fewer masks (a higher pred_iou_thresh or "
            "stability_score_thresh, or a sparser grid)",
        )
        return result

    async def _grid(
        self,
        loaded: LoadedRoute[SegmentRoute],
        session: Session,
        chunks: Sequence[npt.NDArray[np.float32]],
        settings: mask_generator.Everything,
        run: runs.Run,
        *,
        limit: int,
    ) -> list[Candidates]:
        """Each chunk of the grid through GRID, in order, the route's `grid_ahead` queued at once;
        progress after each. A cancelled or failed call cancels the chunks not started (those of a
        call already running end). The masks found are bounded as they come: past `limit` bytes
        (more than one answer could carry) the call stops with LIMIT_REACHED, saying how far it got."""
        ahead = loaded.route.capabilities.grid_ahead
        total = sum(len(chunk) for chunk in chunks)
        found: list[Candidates] = []
        queued: deque[tuple[int, asyncio.Future[Candidates]]] = deque()
        done = held = 0
        try:
            for k, chunk in enumerate(chunks):
                grid = GridRequest(session.embedding, chunk, settings)
                queued.append((len(chunk), asyncio.ensure_future(loaded.submit(GRID, grid, run.notices))))
                while queued and (len(queued) >= ahead or k == len(chunks) - 1):
                    size, answer = queued.popleft()
                    found.append(await answer)
                    done += size
                    held += sum(mask_formats.rle_answer_bytes(counts) for counts in found[-1].counts)
                    if held > limit:
                        raise _too_many_masks(done, total, sum(len(f) for f in found), held, limit)
                    run.progress("points", done, total, f"{done} of {total} points decoded", unit="points")
        finally:
            for _, pending in queued:
                pending.cancel()
            await asyncio.gather(*(pending for _, pending in queued), return_exceptions=True)
        return found

    def close(self, request: infer_pb2.CloseSessionRequest, app: str) -> infer_pb2.CloseSessionResponse:
        return infer_pb2.CloseSessionResponse(closed=self.sessions.close(app, request.session_id))

    # -- the steps ---------------------------------------------------------------------------

    async def load(self, route: Any, run: runs.Run) -> LoadedRoute[SegmentRoute]:
        resolved = await runs.resolve(self.context.routes, route, FEATURE)
        return await runs.load(self.context.routes, resolved, run)

    async def _decode(self, data: bytes, loaded: LoadedRoute[SegmentRoute], run: runs.Run) -> Picture:
        """RGB: transparency composited over white (colours under transparent pixels are arbitrary)."""
        c = self.context
        with run.stage("decode", "decoding the picture"):
            return await c.decoded(data, SEGMENT_BYTES_PER_PIXEL, rgb=True, device=c.picture_device(loaded))

    async def _encode(self, loaded: LoadedRoute[SegmentRoute], rgb: Picture, run: runs.Run) -> Any:
        height, width = rgb.shape[:2]
        with run.stage("encode", f"encoding the {width}x{height} picture ({loaded.device})"):
            return await loaded.submit(ENCODE, rgb, run.notices)

    def _check(
        self, request: infer_pb2.SegmentRequest | infer_pb2.SegmentOnceRequest
    ) -> tuple[list[prompts.Checked], answers.Output]:
        """Everything about the call that needs no picture: its prompts, and what it asks of the masks."""
        s = self.context.settings
        checked = prompts.check_call(_prompt_of(request), request.prompts, s.max_points, s.max_prompts)
        return checked, answers.check_output(request.output, answers.PNG)

    async def _answer(
        self,
        loaded: LoadedRoute[SegmentRoute],
        embedding: Any,
        asked: list[tuple[SamPrompt, bool]],
        output: answers.Output,
        run: runs.Run,
    ) -> _Answer:
        """The prompts' half of Segment and SegmentOnce (each prompt with its all_masks): one decode
        for all of them, then the masks written."""
        what = "the mask" if len(asked) == 1 else f"{len(asked)} masks"
        count = sum(3 if every else 1 for _, every in asked)
        height, width = embedding.picture_height, embedding.picture_width
        nbytes = count * (width * height * MASK_BYTES_PER_PIXEL + (LOW_RES_BYTES if output.low_res else 0))
        fits = max(0, self.context.budget.budget_bytes // max(1, nbytes // count))
        smaller = f"it would fit with {fits} masks a call (fewer objects, or all_masks off)" if fits else "ask for less"
        async with self.context.admitted(nbytes, f"{count} masks of a {width}x{height} picture", smaller=smaller):
            with run.stage("model", f"decoding {what} ({loaded.device})"):
                prompts_asked, every_mask = tuple(p for p, _ in asked), tuple(a for _, a in asked)
                request = DecodeRequest(embedding, prompts_asked, every_mask, output.cleanup)
                key = tuple(sorted({prompt_points(p) for p, _ in asked}))
                decoded = await loaded.submit(DECODE, request, run.notices, key)
            formats = ", ".join(answers.NAMES[f] for f in sorted(output.formats))
            result = run.result(infer_pb2.SegmentResult)
            with run.stage(output.stage, f"writing {what} ({formats})"):
                await self._masks(decoded, output, result)
            del decoded
        runs.check_size(
            result,
            self.context.settings.max_message_bytes,
            f"the {count} masks",
            "ask for fewer objects or masks a call (all_masks off), RLE rather than PNGs or polygons, "
            "or no low-res logits",
        )
        return _Answer(loaded, result)

    async def _masks(self, decoded: list[SamMasks], output: answers.Output, result: infer_pb2.SegmentResult) -> None:
        """Each prompt's masks, best first, in the formats asked (1-bit PNGs by default: a bit per
        pixel is an eighth of the bytes to compress, and the PNG is most of a click's time on a GPU
        machine), written in `result` itself (masks.written says why)."""
        level = self.context.settings.png_compress_level

        def work() -> None:
            for index, masks in enumerate(decoded):
                for k, pixels in enumerate(masks.masks):
                    x0, y0, x1, y1 = (int(v) for v in masks.boxes[k])
                    message = answers.written(
                        np.asarray(pixels, dtype=np.bool_),
                        output,
                        level,
                        extent=(x0, y0, x1, y1),
                        area=int(masks.areas[k]),
                        into=result.masks.add(),
                    )
                    message.predicted_iou = float(masks.ious[k])
                    message.empty = bool(masks.empty[k])
                    message.selected_fraction = float(masks.fractions[k])
                    if output.low_res:  # asked: 256 KiB a mask that most calls never feed back
                        prompts.low_res_message(masks.low_res[k], into=message.low_res)
                    message.prompt_index = index

        await self.context.on_cpu(work)

    def _write_candidates(
        self,
        kept: Candidates,
        output: answers.Output,
        height: int,
        width: int,
        result: infer_pb2.SegmentEverythingResult,
    ) -> None:
        """The generator's masks from their RLE counts (pixels made only for PNG or polygons), written
        in `result` itself (masks.written says why)."""
        level = self.context.settings.png_compress_level
        for k, counts in enumerate(kept.counts):
            x0, y0, x1, y1 = (int(v) for v in kept.boxes[k])
            area = int(counts[1::2].sum())
            extent = (x0, y0, x1 + 1, y1 + 1) if area else (0, 0, 0, 0)
            message = answers.written(
                None, output, level, counts=counts, size=(height, width), extent=extent, into=result.masks.add()
            )
            message.predicted_iou = float(kept.ious[k])
            message.stability_score = float(kept.stability[k])
            message.empty = area == 0
            message.selected_fraction = area / (height * width)
            point = message.point
            point.x, point.y = (float(v) for v in kept.points[k])
            point.label = infer_pb2.POINT_LABEL_FOREGROUND

    def session(self, app: str, session_id: str) -> Session:
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


def _too_many_masks(done: int, total: int, masks: int, held: int, limit: int) -> ServiceError:
    return resource_exhausted(
        Reason.LIMIT_REACHED,
        f"segment everything stopped after {done} of {total} points: the {masks} masks found so far come to "
        f"{held:,} bytes as RLE before duplicates are removed, more than the {limit:,} bytes one answer may carry "
        "(CRAFTAI_MAX_MESSAGE_BYTES); ask for fewer masks (a higher pred_iou_thresh or stability_score_thresh, "
        "or a sparser grid)",
        points_done=str(done),
        points=str(total),
    )
