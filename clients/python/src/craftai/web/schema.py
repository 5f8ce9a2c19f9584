"""The OpenAPI schema as the gateway answers, where FastAPI's own says otherwise: the app key as a
security scheme (a bearer token, or the Craftai-App-Key header) on every operation with the app id
header beside it, and no 422 (FastAPI documents its validation errors so; the gateway answers
them 400 with the error JSON every other error has)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "the app's key: 'Authorization: Bearer <app key>' (the local one: the link "
        "`craftai serve --web` prints carries it)",
    },
    "appKey": {
        "type": "apiKey",
        "in": "header",
        "name": "Craftai-App-Key",
        "description": "the app's key in the gRPC metadata's name (instead of Authorization)",
    },
}
APP_ID = {
    "name": "Craftai-App-Id",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "the app id (default: the gateway's, CRAFTAI_WEB_APP_ID, craftai-web)",
}
FRAMEWORK_ONLY = ("HTTPValidationError", "ValidationError")


def install(app: FastAPI) -> None:
    """Answer the schema below at the app's openapi_url (made once, on the first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = schema(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def schema(app: FastAPI) -> dict[str, Any]:
    made = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = made.setdefault("components", {})
    components["securitySchemes"] = SCHEMES
    schemas = components.get("schemas", {})
    for name in FRAMEWORK_ONLY:
        schemas.pop(name, None)
    for operations in made.get("paths", {}).values():
        for operation in operations.values():
            operation["responses"].pop("422", None)
            operation["security"] = [{"bearer": []}, {"appKey": []}]
            operation.setdefault("parameters", []).append(APP_ID)
    return made
