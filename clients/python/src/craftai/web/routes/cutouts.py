"""/api/v1/cutouts: a cutout session (remove-background's picture and options; the server keeps
the picture, its matte and its SAM embedding), refined with keep and remove prompts, and closed.
The gateway keeps nothing: each refinement sends the whole list of prompts (undo is the list
without its last one)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from craftai.outputs import CutoutPrompt, MatteOutput
from craftai.web.answers import points, text
from craftai.web.callers import Caller
from craftai.web.models import MATTE_BODY, CutoutIn, errors
from craftai.web.parameters import known_query
from craftai.web.routes import API
from craftai.web.routes.matte import Answer, MatteQuery, matte_arguments, matte_upload, outputs_answer

router = APIRouter(prefix=f"{API}/cutouts", dependencies=[Depends(known_query)])


@router.post("", status_code=201, openapi_extra={"requestBody": MATTE_BODY}, responses=errors(404, 409, 412, 413))
async def open_cutout(
    request: Request,
    ai: Caller,
    query: MatteQuery,
    *,
    segment_recipe: Annotated[str | None, Query(description="the image.segment recipe that finds the regions")] = None,
    segment_engine: str | None = None,
    answer: Answer = None,
) -> Response:
    """Remove the background of a picture and keep it on the server to fix with prompts: the
    picture and options as for remove-background (the answers of every refinement use them too).
    Answers 201 with the outputs (JSON by default here: `session_id` beside them; `answer=image`
    for one output's bytes, the id in X-Craftai-Session-Id) and Location."""
    upload, given = await matte_upload(
        request, {**query, "segment_recipe": segment_recipe, "segment_engine": segment_engine, "answer": answer}
    )
    arguments = matte_arguments(given, upload)
    session = await ai.open_cutout(
        upload.picture,
        segment_recipe=text(given["segment_recipe"]),
        segment_engine=text(given["segment_engine"]),
        **arguments,
    )
    assert session.result is not None
    return _answer(
        request, session.session_id, session.result, text(given["answer"]), prompts=0, changed=0, status_code=201
    )


@router.post("/{session_id}/refine", responses=errors(404, 413))
async def refine_cutout(
    session_id: str, body: CutoutIn, request: Request, ai: Caller, answer: Answer = None
) -> Response:
    """The outputs of the whole picture after these prompts, in order: each {action: keep | remove,
    points: [[x, y], [x, y, foreground]], box: [x0, y0, x1, y1]}, a region SAM finds; [] is the
    cutout as opened. JSON by default (`prompts`, `changed_pixels` beside the outputs)."""
    asked = [CutoutPrompt(p.action, points(p), p.box) for p in body.prompts]
    session = ai.resume_cutout(session_id)
    result = await session.refine(asked)
    return _answer(request, session_id, result, answer, prompts=len(asked), changed=session.changed_pixels)


@router.delete("/{session_id}", status_code=204, responses=errors())
async def close_cutout(session_id: str, ai: Caller) -> Response:
    """Forget the cutout's picture on the server (nothing happens if it is already gone)."""
    await ai.resume_cutout(session_id).close()
    return Response(status_code=204)


def _answer(
    request: Request,
    session_id: str,
    result: MatteOutput,
    answer: str | None,
    *,
    prompts: int,
    changed: int,
    status_code: int = 200,
) -> Response:
    """The outputs with the session's id, prompts and changed pixels (JSON unless an image is asked)."""
    headers = {
        "X-Craftai-Session-Id": session_id,
        "X-Craftai-Changed-Pixels": str(changed),
        "Location": f"{API}/cutouts/{session_id}",
    }
    more = {"session_id": session_id, "prompts": prompts, "changed_pixels": changed}
    json_first = answer or ("image" if request.headers.get("accept", "").startswith("image/") else "json")
    return outputs_answer(request, result, json_first, more=more, status_code=status_code, headers=headers)
