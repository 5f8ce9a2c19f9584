"""Cutout sessions: a matte fixed with keep and remove prompts (docs/MATTE.md, "Fixing a cutout").

open:    the matte and its outputs as Matte makes them (features/matte.py: decode within the decode
         budget, the route's MATTE; the cutout's colours made too where a cutout or a composite
         needs them), then the picture's SAM embedding (the image.segment route's ENCODE) -> the
         outputs encoded as Matte answers them -> kept in the session store under one id: the
         picture, the matte, the colours and the embedding, all counted in the session budget
refine:  (interactive work) the prompts checked -> one DECODE for all of them on the session's
         SAM route -> the regions merged into the matte and the colours estimated again where
         alpha changed (pipelines/cutout_merge.py), the outputs made from them
         (pipelines/matte_outputs.py) -> encoded. The answer is a function of the prompt list.

A cutout session is an image.segment session too: Segment, SegmentEverything and CloseSession
take its id.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from craftai_common.errors import failed_precondition, invalid_argument, resource_exhausted
from craftai_common.metadata import tenant_var
from craftai_infer import prompts
from craftai_infer.features import run as runs
from craftai_infer.features.context import FeatureContext
from craftai_infer.features.matte import MatteFeature, bytes_per_pixel
from craftai_infer.features.segment import MASK_BYTES_PER_PIXEL, SegmentFeature
from craftai_infer.loader import LoadedRoute
from craftai_infer.matte_options import Checked as MatteAsked
from craftai_infer.pipelines.matte_render import render_device
from craftai_infer.pipelines.matte_spec import Cover, Kind, OutputsSpec
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.picture_convert import over_white
from craftai_infer.pipelines.segment_sam import prompt_points
from craftai_infer.routes import DECODE, ENCODE, DecodeRequest, SegmentRoute
from craftai_infer.scheduling import WorkClass, work_class_var
from craftai_infer.sessions import BudgetTooSmallError, SessionStore
from craftai_wire.v1 import common_pb2, infer_pb2
from craftai_wire.vocabulary import CUTOUT_ACTION_OF, CutoutAction, Reason

U8 = npt.NDArray[np.uint8]
OPEN_STAGES = ("decode", "model", "segment", "encode")
REFINE_STAGES = ("model", "merge", "encode")
# What a refinement holds per pixel of its picture beyond its outputs' (features/matte.py's
# bytes_per_pixel) and its masks' (MASK_BYTES_PER_PIXEL each): the matte in float, a region's guided
# filter (float32 planes of the guide, its moments and coefficients, on the region's box) and the
# colours estimated again; tests/unit/test_cutout_memory.py measures it with a region as large as the
# picture (the worst case).
MERGE_BYTES_PER_PIXEL = 170


@dataclass(frozen=True, eq=False)
class Kept:
    """What a cutout session keeps beside its embedding: the picture (its own copy: the decoded one
    gives the decode budget back when the open ends), the matte the route made, the cutout's colours
    (None where no output needs them), and what the open asked, which every answer repeats."""

    picture: Picture
    matte: U8
    colours: U8 | None
    asked: MatteAsked
    spec: OutputsSpec
    matte_route: common_pb2.RouteRef

    @property
    def nbytes(self) -> int:
        background = self.spec.background
        extra = background.picture.nbytes if isinstance(background, Cover) else 0
        colours = self.colours.nbytes if self.colours is not None else 0
        return int(self.picture.nbytes + self.matte.nbytes + colours + extra)


def _needs_colours(request: infer_pb2.MatteRequest) -> bool:
    kinds = {spec.kind for spec in request.outputs}
    wanted = {infer_pb2.MATTE_OUTPUT_KIND_CUTOUT, infer_pb2.MATTE_OUTPUT_KIND_COMPOSITE}
    return bool(kinds & wanted) and not request.naive


class CutoutFeature:
    def __init__(
        self,
        context: FeatureContext,
        matte: MatteFeature,
        segment: SegmentFeature,
        sessions: SessionStore,
        replica: str,
    ) -> None:
        self.context = context
        self.matte = matte
        self.segment = segment
        self.sessions = sessions
        self.replica = replica

    async def open(self, request: infer_pb2.OpenCutoutRequest, app: str, run: runs.Run) -> infer_pb2.CutoutResult:
        tenant = tenant_var.get() or app
        self.sessions.check_room(app, tenant)  # TOO_MANY_SESSIONS before any work
        asked = infer_pb2.MatteRequest()
        asked.CopyFrom(request.matte)
        if not asked.outputs and not asked.want_cutout:
            asked.outputs.add(kind=infer_pb2.MATTE_OUTPUT_KIND_CUTOUT, format=infer_pb2.MATTE_FORMAT_PNG)
        elif not asked.outputs:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                "a cutout session answers the outputs named in matte.outputs (want_cutout is the old form of Matte)",
                field="matte.want_cutout",
            )
        run.stages = OPEN_STAGES
        _merging()  # torch: refused before any work where it cannot be imported
        colours = _needs_colours(asked)
        await self._fits(asked.picture.data, colours)
        also: tuple[Kind, ...] = ("matte", "cutout") if colours else ("matte",)
        sam = await self.segment.load(request.segment_route, run)  # one not set up: refused before any work
        made = await self.matte.made(asked, run, also=also, one_matte=True)
        width, height = made.size
        with run.stage("segment", f"encoding the {width}x{height} picture for the prompts ({sam.device})"):
            rgb = await self.context.on_cpu(over_white, made.picture)
            embedding = await sam.submit(ENCODE, rgb, run.notices)
            del rgb
        result = run.result(infer_pb2.CutoutResult)
        rendered = made.rendered
        await self.matte.answered(
            made.asked, made.loaded.ref, rendered, run, size=made.size, device=made.loaded.device, into=result.matte
        )
        assert rendered.matte is not None
        kept = Kept(
            picture=np.array(made.picture, copy=True),
            matte=np.array(rendered.matte, copy=True),
            colours=np.ascontiguousarray(rendered.cutout[:, :, :3])
            if colours and rendered.cutout is not None
            else None,
            asked=dataclasses.replace(made.asked, background_picture=None),  # its pixels are in spec
            spec=made.spec,
            matte_route=made.loaded.ref,
        )
        del made
        try:
            opened = self.sessions.open(
                app, embedding, width=width, height=height, route=sam, device=sam.device, tenant=tenant, kept=kept
            )
        except BudgetTooSmallError as exc:
            raise resource_exhausted(
                Reason.LIMIT_REACHED,
                f"cannot keep this picture: {exc} (CRAFTAI_SESSION_BUDGET_BYTES); raise the budget, send a smaller "
                "picture, or use Matte, which keeps nothing",
            ) from exc
        self._describe(result, opened.session.id, sam, prompts=0, changed=0)
        return result

    async def _fits(self, data: bytes, colours: bool) -> None:
        """LIMIT_REACHED before any work where what the session would keep beside its embedding (the
        picture, the matte, the colours: its size from the header) is more than the whole budget."""
        head = await self.context.header_of(data)
        kept = head.width * head.height * (4 + 1 + (3 if colours else 0))  # RGBA at most
        budget = self.sessions.budget_bytes
        if kept > budget:
            raise resource_exhausted(
                Reason.LIMIT_REACHED,
                f"a cutout session of a {head.width}x{head.height} picture keeps about {kept / 2**20:,.0f} MiB beside "
                f"its embedding, more than the whole session budget ({budget / 2**20:,.0f} MiB, "
                "CRAFTAI_SESSION_BUDGET_BYTES): send a smaller picture, raise the budget, or use Matte, "
                "which keeps nothing",
            )

    async def refine(self, request: infer_pb2.RefineCutoutRequest, app: str, run: runs.Run) -> infer_pb2.CutoutResult:
        work_class_var.set(WorkClass.INTERACTIVE)  # a click: before any bulk work
        checked = self._checked(request.prompts)
        run.stages = REFINE_STAGES
        session = self.segment.session(app, request.session_id)
        kept: Kept | None = session.kept
        if kept is None:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                f"session {session.id} keeps a picture for image.segment, not a cutout: open a cutout session "
                "(OpenCutout) to refine a matte",
                field="session_id",
            )
        loaded: LoadedRoute[SegmentRoute] = run.hold(session.route)
        width, height = session.width, session.height
        asked = [(action, c.within(width, height)) for action, c in checked]
        pixels = width * height
        nbytes = pixels * (
            MERGE_BYTES_PER_PIXEL
            + len(asked) * MASK_BYTES_PER_PIXEL
            + bytes_per_pixel(kept.spec.kinds, kept.spec.naive)
        )
        what = f"{len(asked)} prompts on a {width}x{height} cutout"
        smaller = "it would fit with fewer prompts, or a cutout session of a smaller picture"
        async with self.context.admitted(nbytes, what, smaller=smaller):
            masks: list[npt.NDArray[np.bool_]] = []
            if asked:
                with run.stage("model", f"finding {len(asked)} regions ({loaded.device})"):
                    sam_prompts = tuple(p for _, p in asked)
                    decode = DecodeRequest(session.embedding, sam_prompts, tuple(False for _ in asked))
                    key = tuple(sorted({prompt_points(p) for p in sam_prompts}))
                    decoded = await loaded.submit(DECODE, decode, run.notices, key)
                    masks = [np.asarray(found.masks[0], dtype=np.bool_) for found in decoded]
                    del decoded
            regions = [(action == CutoutAction.KEEP, mask) for (action, _), mask in zip(asked, masks, strict=True)]
            del masks
            with run.stage("merge", f"merging {len(asked)} regions into the matte"):
                refined = _merging().refined
                device = render_device(session.device)
                rendered, changed = await self.context.on_cpu(
                    lambda: refined(kept.picture, kept.matte, kept.colours, kept.spec, regions, device=device)
                )
            regions.clear()  # the masks given back before the encodes
            run.stages_ms.update(rendered.stages_ms)  # within "merge": each output made
            result = run.result(infer_pb2.CutoutResult)
            await self.matte.answered(
                kept.asked,
                kept.matte_route,
                rendered,
                run,
                size=(width, height),
                device=session.device,
                into=result.matte,
            )
        self._describe(result, session.id, loaded, prompts=len(asked), changed=changed)
        return result

    def _checked(self, given: Any) -> list[tuple[CutoutAction, prompts.Checked]]:
        s = self.context.settings
        if len(given) > s.max_prompts:
            raise invalid_argument(
                Reason.TOO_MANY_PROMPTS,
                f"the request has {len(given)} prompts; a cutout takes at most {s.max_prompts} (CRAFTAI_MAX_PROMPTS): "
                "open the cutout again with this answer's picture to go on",
                field="prompts",
            )
        checked = []
        for index, prompt in enumerate(given):
            where = f"prompts[{index}]"
            action = CUTOUT_ACTION_OF.get(prompt.action)
            if action is None:
                raise invalid_argument(
                    Reason.BAD_PROMPT,
                    f"prompt {index} has no action: each is CUTOUT_ACTION_KEEP or CUTOUT_ACTION_REMOVE",
                    field=f"{where}.action",
                )
            plain = infer_pb2.Prompt(points=prompt.points)
            if prompt.HasField("box"):
                plain.box.CopyFrom(prompt.box)
            checked.append((action, prompts.check(plain, s.max_points, where)))
        return checked

    def _describe(
        self, result: infer_pb2.CutoutResult, session_id: str, sam: LoadedRoute[Any], *, prompts: int, changed: int
    ) -> None:
        result.session_id = session_id
        result.prompts = prompts
        result.changed_pixels = changed
        result.segment_route.CopyFrom(sam.ref)
        result.idle_seconds = self.sessions.idle_seconds
        result.replica = self.replica


def _merging() -> ModuleType:
    """pipelines.cutout_merge, imported on first use (torch); FAILED_PRECONDITION where it cannot be."""
    try:
        from craftai_infer.pipelines import cutout_merge
    except ImportError as exc:
        raise failed_precondition(
            Reason.ENGINE_NOT_INSTALLED,
            f"fixing a cutout is done with torch, which this infer service cannot import ({exc}); "
            "install craftai-infer[torch]",
        ) from exc
    return cutout_merge
