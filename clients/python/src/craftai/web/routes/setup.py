"""POST /api/v1/setup: a route downloaded, verified and prepared, its progress as server-sent events."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from craftai.web.callers import Caller
from craftai.web.events import stream_of
from craftai.web.models import EVENT_STREAM, SetupIn, errors
from craftai.web.parameters import known_query
from craftai.web.routes import API

router = APIRouter(prefix=API, dependencies=[Depends(known_query)])


@router.post("/setup", responses={200: EVENT_STREAM, **errors(404, 412, 413, 502, 507)})
async def setup(body: SetupIn, ai: Caller) -> Response:
    """Download, verify and prepare a route: server-sent events `progress`, `notice`, then one
    `result` (or `error`). Leaving early never stops the preparation: the next call joins it."""
    return await stream_of(ai.setup(body.feature, body.recipe, body.engine))
