"""The HTTP API's docs UI at /docs: Swagger UI on the gateway's own schema, its script and style
served by the gateway from the fastapi-offline package (nothing is fetched from a CDN: the gateway
and the page work without a network). /api, where rembg serves its UI, leads there too.

Swagger UI keeps what is typed into its Authorize dialog in its memory only (persistAuthorization
off, as the page keeps its key), and asks no validator on the internet."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from craftai.web.routes import API

router = APIRouter(include_in_schema=False)
DOCS = "/docs"
ASSETS = f"{DOCS}/assets"
SCHEMA = f"{API}/openapi.json"
PARAMETERS = {"persistAuthorization": False, "validatorUrl": None, "tryItOutEnabled": True}


def assets() -> StaticFiles:
    """Swagger UI's files as the fastapi-offline package ships them (swagger-ui-bundle.js, swagger-ui.css)."""
    return StaticFiles(directory=str(resources.files("fastapi_offline") / "static"))


@router.get(DOCS)
async def docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{SCHEMA}",
        title="craft-ai services: HTTP API",
        swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{root}/favicon.ico",
        swagger_ui_parameters=PARAMETERS,
    )


@router.get("/api")
async def rembg_docs_path() -> Response:
    return RedirectResponse(DOCS, status_code=307)
