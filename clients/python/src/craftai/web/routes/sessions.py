"""/api/v1/sessions: a segment session opened on a picture, prompted (clicks, a box, several
objects), segmented whole (every object), and closed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from craftai.outputs import EverythingOutput, Prompt, SegmentOutput
from craftai.web.answers import answered, everything, logits, mask, points, route_headers, wants
from craftai.web.callers import Caller
from craftai.web.errors import bad_request
from craftai.web.events import progress_stream
from craftai.web.models import EVERYTHING_ANSWERS, PICTURE_BODY, EverythingIn, SegmentIn, errors
from craftai.web.parameters import known_query, refuse_unknown
from craftai.web.routes import API
from craftai.web.uploads import PICTURE_FIELDS, read_upload
from craftai_wire.v1 import common_pb2

router = APIRouter(prefix=f"{API}/sessions", dependencies=[Depends(known_query)])
FORM_FIELDS = frozenset({"recipe", "engine"})


@router.post("", status_code=201, openapi_extra={"requestBody": PICTURE_BODY}, responses=errors(404, 409, 412, 413))
async def open_session(
    request: Request, ai: Caller, recipe: str | None = None, engine: str | None = None
) -> JSONResponse:
    """Open a segment session on a picture (the image encoder runs now): its id and size."""
    upload = await read_upload(request)
    refuse_unknown(upload.fields, FORM_FIELDS, "form field")
    refuse_unknown(upload.files, PICTURE_FIELDS, "file field")
    session = await ai.open_session(
        upload.picture, upload.fields.get("recipe", recipe), upload.fields.get("engine", engine)
    )
    body = {
        "session_id": session.session_id,
        "width": session.width,
        "height": session.height,
        "recipe": session.recipe,
        "engine": session.engine,
        "device": session.device,
        "idle_seconds": session.idle_seconds,
        "timing_ms": session.timing_ms,
        "notices": session.notices,
    }
    return JSONResponse(body, status_code=201, headers={"Location": f"{API}/sessions/{session.session_id}"})


@router.post("/{session_id}/segment", responses=errors(404, 413))
async def segment(
    session_id: str,
    body: SegmentIn,
    request: Request,
    ai: Caller,
    *,
    answer: Annotated[
        Literal["png", "json"] | None, Query(description="the best mask's PNG, or JSON (default: Accept)")
    ] = None,
) -> Response:
    """Prompt a session: clicks, a box, mask feedback, or several objects. JSON: every mask
    with its scores (PNG, RLE, polygons as asked); `answer=png` (or Accept: image/png): the
    first prompt's best mask as a PNG, its scores in headers."""
    several = None
    if body.prompts is not None:
        several = [
            Prompt(
                points=points(p),
                box=p.box,
                mask_input=logits(p.mask_input, f"prompts.{i}.mask_input"),
                all_masks=p.all_masks,
                single_mask_like_meta=p.single_mask_like_meta,
            )
            for i, p in enumerate(body.prompts)
        ]
    result: SegmentOutput = await ai.resume_session(session_id).segment(
        points=points(body),
        box=body.box,
        mask_input=logits(body.mask_input, "mask_input"),
        all_masks=body.all_masks,
        prompts=several,
        formats=body.formats,
        polygon_tolerance=body.polygon_tolerance,
        max_hole_area=body.max_hole_area,
        max_sprinkle_area=body.max_sprinkle_area,
        single_mask_like_meta=body.single_mask_like_meta,
        low_res=body.low_res,
    )
    headers = route_headers(result)
    if wants(request, answer, "png", "image/png"):
        best = result.best
        if not best.png:
            raise bad_request("answer=png needs the png format among the formats asked", field="formats")
        headers |= {
            "X-Craftai-Predicted-Iou": f"{best.predicted_iou:.6f}",
            "X-Craftai-Empty": "true" if best.empty else "false",
            "X-Craftai-Selected-Fraction": f"{best.selected_fraction:.6f}",
        }
        return Response(best.png, media_type="image/png", headers=headers)
    masks = [mask(m, body.low_res) for m in result.masks]
    return JSONResponse({"session_id": session_id, **answered(result), "masks": masks}, headers=headers)


@router.post("/{session_id}/everything", responses={200: EVERYTHING_ANSWERS, **errors(404, 413)})
async def segment_everything(session_id: str, body: EverythingIn, request: Request, ai: Caller) -> Response:
    """Every object of the session's picture (Meta's automatic mask generator: a grid of single
    clicks, filtered, de-duplicated), best predicted IoU first, masks as RLE unless `formats`
    says otherwise. With Accept: text/event-stream: server-sent events `progress` (after each
    batch of clicks), then one `result` (the JSON answer) or `error`."""
    session = ai.resume_session(session_id)

    def call(on_progress: Callable[[common_pb2.Progress], None] | None) -> Awaitable[EverythingOutput]:
        return session.segment_everything(
            formats=body.formats, polygon_tolerance=body.polygon_tolerance, on_progress=on_progress, **body.options()
        )

    if "text/event-stream" not in request.headers.get("accept", ""):
        result = await call(None)
        return JSONResponse(everything(result), headers=route_headers(result))
    return await progress_stream(call, everything)


@router.delete("/{session_id}", status_code=204, responses=errors())
async def close_session(session_id: str, ai: Caller) -> Response:
    """Forget the session's picture on the server (nothing happens if it is already gone)."""
    await ai.resume_session(session_id).close()
    return Response(status_code=204)
