"""The page (/ and /static/) and /healthz."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)
STATIC = resources.files("craftai.web") / "static"


@router.get("/healthz")
async def healthz() -> dict[str, bool]:
    return {"ok": True}


@router.get("/")
async def page() -> Response:
    return Response((STATIC / "index.html").read_bytes(), media_type="text/html; charset=utf-8")
