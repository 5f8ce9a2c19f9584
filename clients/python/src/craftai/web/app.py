"""The HTTP API beside gRPC, and the page that tries both features (docs/WEB.md): `build()` composes
the routers (craftai.web.routes), the error answers and the guards in front of them.

Every endpoint calls the services through the asyncio SDK (AsyncAiClient) with the caller's own
app id and key: the gateway holds no model code, checks no feature option of its own (the SDK and
the services do, and their plain messages are answered as they are) and fetches no URL. The
schema is served at /api/v1/openapi.json.

A request passes, in order: `Calls` (its own task: cancelled when its client leaves or the stop's
grace is over), `HostCheck` (DNS rebinding), `HeadLimit` (431), CORS when set, `KeyCheck` (the key
verified before any of the body is read), `BodyLimit` (size, time, the bodies held at once), then
its router. uvicorn's protocol (craftai.web.connections) bounds connections and head time before.
The frame stream's WebSocket (craftai.web.routes.frames) checks its Host, key and frames' bytes itself.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from craftai.client import AsyncAiClient
from craftai.errors import CraftAiError
from craftai.policy import Retries
from craftai.web.calls import Calls, InFlight
from craftai.web.connections import HeadLimit
from craftai.web.errors import bad_request, error_response
from craftai.web.hosts import HostCheck
from craftai.web.keycheck import KeyCheck, Verifier
from craftai.web.parameters import unknown
from craftai.web.routes import API, cutouts, docs, frames, matte, page, sessions, setup, status
from craftai.web.schema import install
from craftai.web.settings import WebSettings
from craftai.web.uploads import BodyLimit, BodyRules
from craftai_wire.vocabulary import GatewayReason, Reason

EXPOSED_HEADERS = [
    "X-Request-Id",
    "X-Craftai-Recipe",
    "X-Craftai-Engine",
    "X-Craftai-Device",
    "X-Craftai-Width",
    "X-Craftai-Height",
    "X-Craftai-Predicted-Iou",
    "X-Craftai-Empty",
    "X-Craftai-Selected-Fraction",
    "Server-Timing",
    "Retry-After",
]
OPENAPI = f"{API}/openapi.json"
# The framework's own HTTP errors (no such path, a method the path does not take, a multipart body
# without its boundary, ...) with a code and a reason like every other error.
HTTP_REASONS = {
    400: (grpc.StatusCode.INVALID_ARGUMENT, GatewayReason.BAD_REQUEST),
    404: (grpc.StatusCode.NOT_FOUND, GatewayReason.NOT_FOUND),
    405: (grpc.StatusCode.UNIMPLEMENTED, GatewayReason.METHOD_NOT_ALLOWED),
    408: (grpc.StatusCode.DEADLINE_EXCEEDED, GatewayReason.REQUEST_TIMEOUT),
    413: (grpc.StatusCode.INVALID_ARGUMENT, GatewayReason.UPLOAD_TOO_LARGE),
}
log = logging.getLogger("craftai.web")


def build(settings: WebSettings | None = None) -> FastAPI:
    """The gateway's ASGI app: the API under /api/v1, the page at /. `app.state.in_flight` holds
    its calls (for the server's stop)."""
    settings = settings or WebSettings()
    verifier = Verifier(settings.key_cache_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        retries = Retries(wait_seconds=settings.retry_seconds)
        async with AsyncAiClient(
            app_id=settings.app_id, target=settings.target, infer=settings.infer, retries=retries
        ) as root:
            app.state.root = root
            verifier.client = root
            yield

    app = FastAPI(
        title="craft-ai services: HTTP API",
        version="1",
        description="Remove backgrounds and select objects over HTTP; the same services, keys and limits as gRPC.",
        openapi_url=OPENAPI,
        docs_url=None,  # FastAPI's loads Swagger UI from a CDN: craftai.web.routes.docs serves it offline
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.in_flight = InFlight()
    _answer_errors(app)
    for family in (status, setup, matte, cutouts, sessions, frames, page, docs):
        app.include_router(family.router)
    app.mount("/static", StaticFiles(directory=str(page.STATIC)), name="static")
    app.mount(docs.ASSETS, docs.assets(), name="docs-assets")
    install(app)

    # Added innermost first: the last added runs first.
    rules = BodyRules(
        settings.max_upload_bytes, settings.max_body_bytes, settings.body_timeout_seconds, settings.body_min_rate
    )
    app.add_middleware(BodyLimit, rules=rules)
    # The frame stream's WebSocket passes the middlewares by (they guard HTTP): it applies the same
    # key check and bodies' budget itself (craftai.web.routes.frames).
    app.state.verifier = verifier
    app.state.body_rules = rules
    app.add_middleware(
        KeyCheck, verifier=verifier, default_app_id=settings.app_id, prefix=f"{API}/", open_paths={OPENAPI}
    )
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Craftai-App-Id", "Craftai-App-Key"],
            expose_headers=EXPOSED_HEADERS,
        )
    app.add_middleware(HeadLimit, limit=settings.max_header_bytes)
    app.add_middleware(
        HostCheck, listening=settings.host, allowed=settings.allowed_hosts, exempt=frozenset({"/healthz"})
    )
    app.add_middleware(Calls, in_flight=app.state.in_flight)
    return app


def _answer_errors(app: FastAPI) -> None:
    """Every error as the JSON of craftai.web.errors, with its reason."""

    @app.exception_handler(CraftAiError)
    async def craftai_error(request: Request, exc: CraftAiError) -> Response:
        return error_response(exc)

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError) -> Response:
        return error_response(bad_request(str(exc)))  # the SDK's own checks of options, in its words

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = list(exc.errors())
        extra = [p for p in problems if p.get("type") == "extra_forbidden"]
        if extra:
            refusal = unknown([_where(p) for p in extra], _fields(request), "JSON field")
            if refusal is not None:
                return error_response(refusal)
        first = problems[0] if problems else {}
        where = _where(first)
        if first.get("type") == "json_invalid":
            at = first.get("loc", ("body", 0))[-1]
            detail = (first.get("ctx") or {}).get("error", "not JSON")
            message = f"the body is not valid JSON: {detail} at character {at}"
            return error_response(bad_request(message, field="body"))
        if where == "" and first.get("type") == "missing":
            return error_response(bad_request("the request needs a JSON body (Content-Type: application/json)"))
        return error_response(
            bad_request(f"{where or 'the request'}: {first.get('msg', 'not understood')}", field=where or None)
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code, reason = HTTP_REASONS.get(exc.status_code, (grpc.StatusCode.INVALID_ARGUMENT, GatewayReason.BAD_REQUEST))
        message = str(exc.detail)
        allowed = (exc.headers or {}).get("Allow")
        if exc.status_code == 404:
            message = f"no such path: {request.url.path} (the HTTP API is under {API}/, its docs at /docs)"
        elif exc.status_code == 405 and allowed:
            message = f"{request.url.path} takes {allowed}, not {request.method}"
        answer = error_response(CraftAiError(code, message, reason), exc.status_code)
        answer.headers.update(exc.headers or {})
        return answer

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("the gateway failed on %s %s", request.method, request.url.path)
        error = CraftAiError(
            grpc.StatusCode.INTERNAL, f"internal error in the gateway ({type(exc).__name__})", Reason.INTERNAL
        )
        return error_response(error, 500)


def _where(problem: Any) -> str:
    """A validation problem's field, as dotted names (without pydantic's leading "body")."""
    return ".".join(str(part) for part in problem.get("loc", ()) if part != "body")


def _fields(request: Request) -> list[str]:
    """The JSON fields the endpoint's body takes (its model's), for an unknown field's message."""
    route = request.scope.get("route")
    body = getattr(getattr(route, "dependant", None), "body_params", [])
    names: list[str] = []
    for param in body:
        model = getattr(param.field_info, "annotation", None)
        names += list(getattr(model, "model_fields", {}))
    return names
