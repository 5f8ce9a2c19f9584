"""Parameters an endpoint does not take are refused, named, rather than ignored: `?only_mask=true`
answered with a cutout and 200 looks like success and is not what was asked. Names that other
tools use for the same idea (rembg's server and Python API, Meta's SAM predictor) get a hint
saying what this API calls it."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from craftai.errors import CraftAiError
from craftai.web.errors import bad_request
from craftai_wire.vocabulary import GatewayReason

_MATTE = "the matte (outputs=matte) or a 1-bit mask (outputs=mask, threshold=)"
_ALPHA_MATTING = "no alpha matting to set: every cutout's colours are estimated (naive=true keeps the picture's own)"
HINTS = {
    # rembg's server (its query and form names) and its Python API
    "model": "rembg's model is a recipe here: recipe=u2netp (GET /api/v1/status lists them)",
    "session": "rembg's session is a recipe here: recipe=u2netp",
    "om": f"rembg's only_mask is {_MATTE}",
    "only_mask": f"rembg's only_mask is {_MATTE}",
    "ppm": "rembg's post_process_mask: a hard mask is outputs=mask with threshold=",
    "post_process_mask": "rembg's post_process_mask: a hard mask is outputs=mask with threshold=",
    "bgc": "rembg's bgc is bg_color=#rrggbb[aa] or r,g,b[,a] (the composite)",
    "bgcolor": "rembg's bgcolor is bg_color=#rrggbb[aa] or r,g,b[,a] (the composite)",
    "a": _ALPHA_MATTING,
    "af": _ALPHA_MATTING,
    "ab": _ALPHA_MATTING,
    "ae": _ALPHA_MATTING,
    "alpha_matting": _ALPHA_MATTING,
    "alpha_matting_foreground_threshold": _ALPHA_MATTING,
    "alpha_matting_background_threshold": _ALPHA_MATTING,
    "alpha_matting_erode_size": _ALPHA_MATTING,
    "cc": "rembg's cc (u2net_cloth_seg's cloth category) is part=upper, lower or full",
    "cloth_category": "rembg's cloth_category (u2net_cloth_seg) is part=upper, lower or full",
    "url": "the gateway fetches no URL: send the picture's bytes (the body, or the form field picture)",
    "extras": "rembg's extras: recipe= and engine= choose the route; prompts go to /api/v1/sessions",
    # Meta's SAM predictor
    "point_coords": "points: [[x, y, foreground], ...] (or [{x, y, foreground}])",
    "point_labels": "points: [[x, y, foreground], ...]: each point's label is its third value (true: the object)",
    "multimask_output": "all_masks: true (three masks for an ambiguous prompt)",
    "input_box": "box: [x0, y0, x1, y1]",
    "boxes": "box: [x0, y0, x1, y1] (several objects: prompts: [{box}, ...])",
}


def unknown(given: Iterable[str], known: Collection[str], where: str) -> CraftAiError | None:
    """The refusal of the names in `given` that are not `known` (None when all are): each named,
    the known ones listed, a hint for a name another tool uses."""
    strangers = sorted({name for name in given if name not in known})
    if not strangers:
        return None
    hints = [f"{name}: {HINTS[name]}" for name in strangers if name in HINTS]
    names = ", ".join(repr(name) for name in strangers)
    message = f"this endpoint takes no {where} {names}"
    message += f" (it takes {', '.join(sorted(known))})" if known else " (it takes none)"
    if hints:
        message += "; " + "; ".join(hints)
    return bad_request(message, GatewayReason.UNKNOWN_PARAMETER, field=strangers[0])


def refuse_unknown(given: Iterable[str], known: Collection[str], where: str) -> None:
    refusal = unknown(given, known, where)
    if refusal is not None:
        raise refusal


def query_names(route: APIRoute) -> frozenset[str]:
    """The query parameters an endpoint declares (its dependencies' too), by their names on the wire."""
    return frozenset(_query(route.dependant))


def _query(dependant: Dependant) -> list[str]:
    names = [field.alias for field in dependant.query_params]
    for inner in dependant.dependencies:
        names += _query(inner)
    return names


async def known_query(request: Request) -> None:
    """A router dependency: the request's query parameters are the endpoint's, or it is refused.
    The body is read (within the gateway's bounds) before the answer: a connection closed on an
    unread upload is reset, and the client may lose the answer that says what was wrong."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    refusal = unknown(request.query_params.keys(), query_names(route), "query parameter")
    if refusal is not None:
        with contextlib.suppress(RuntimeError):  # already read (a JSON body)
            async for _ in request.stream():
                pass
        raise refusal
