"""GET /api/v1/status: the device, the engines, every route's state and the catalogue's advice."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from craftai.errors import CraftAiError
from craftai.web.answers import message
from craftai.web.callers import Caller
from craftai.web.models import errors
from craftai.web.parameters import known_query
from craftai.web.routes import API

router = APIRouter(prefix=API, dependencies=[Depends(known_query)])


@router.get("/status", responses=errors())
async def status(ai: Caller) -> dict[str, Any]:
    """The infer service's device and engines, every route's state, and the route each feature
    would use on this installation (the catalogue's advice)."""
    runtime = await ai.runtime()
    features = await ai.features()
    routes = await ai.status()
    advice: dict[str, Any] = {}
    for feature in features:
        try:
            resolved = await ai.resolve(feature.name)
        except CraftAiError as exc:
            advice[feature.name] = {"error": exc.message}
            continue
        advice[feature.name] = message(resolved.proto)
    return {
        "runtime": message(runtime.proto),
        "features": [message(f.proto) for f in features],
        "routes": [message(r.proto) for r in routes],
        "resolved": advice,
    }
