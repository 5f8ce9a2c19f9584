"""The page (/, /static/ and /favicon.ico), the words it shares with the services (/vocabulary.js), and /healthz."""

from __future__ import annotations

import json
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from craftai_wire import advice
from craftai_wire.vocabulary import PARTS_OF, CutoutAction, GatewayReason, Reason

router = APIRouter(include_in_schema=False)
STATIC = resources.files("craftai.web") / "static"


def vocabulary_module() -> str:
    """An ES module of the error reasons, the recipes' parts and the cutout prompts' actions
    (craftai_wire.vocabulary) and of the recipe advice's rule (craftai_wire.advice): the page's only
    copy of them."""
    reasons = {reason.name: reason.value for enum in (Reason, GatewayReason) for reason in enum}
    rules = [
        {"subject": r.subject.value, "gpu": r.gpu, "min_side": r.min_side, "recipe": r.recipe.value, "why": r.why}
        for r in advice.RULES
    ]
    parts = {recipe.value: [part.value for part in found] for recipe, found in PARTS_OF.items()}
    actions = {action.name: action.value for action in CutoutAction}
    return (
        "// The error reasons of the services and of the gateway, the recipes whose mattes are of parts\n"
        "// and the actions of a cutout's prompts, served from craftai_wire.vocabulary;\n"
        "// the rule that advises an image.matte recipe for a picture, from craftai_wire.advice.\n"
        f"export const Reason = Object.freeze({json.dumps(reasons, indent=1)});\n"
        f"export const Subjects = Object.freeze({json.dumps([s.value for s in advice.Subject])});\n"
        f"export const AdviceRules = Object.freeze({json.dumps(rules, indent=1)});\n"
        f"export const PartsOf = Object.freeze({json.dumps(parts, indent=1)});\n"
        f"export const CutoutAction = Object.freeze({json.dumps(actions, indent=1)});\n"
    )


@router.get("/healthz")
async def healthz() -> dict[str, bool]:
    return {"ok": True}


@router.get("/")
async def page() -> Response:
    return Response((STATIC / "index.html").read_bytes(), media_type="text/html; charset=utf-8")


@router.get("/favicon.ico")
async def favicon() -> Response:
    """The page's icon where browsers and tools look for it first (a PNG: every browser takes it there)."""
    return Response((STATIC / "favicon.png").read_bytes(), media_type="image/png")


@router.get("/vocabulary.js")
async def vocabulary() -> Response:
    return Response(vocabulary_module(), media_type="text/javascript; charset=utf-8")
