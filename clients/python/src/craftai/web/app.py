"""The HTTP API beside gRPC, and the page that tries both features (docs/WEB.md).

Every endpoint calls the services through the asyncio SDK (AsyncAiClient) with the caller's own
app id and key: the gateway holds no model code, checks no feature option of its own (the SDK and
the services do, and their plain messages are answered as they are) and fetches no URL. The
schema is served at /api/v1/openapi.json.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Annotated, Any, Literal, TypeVar

import grpc
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from craftai.client import AsyncAiClient
from craftai.errors import CraftAiError
from craftai.installation import SetupEvent, SetupOutput
from craftai.outputs import EverythingOutput, LowResMask, MaskOutput, MatteOutput, Point, Prompt, SegmentOutput
from craftai.policy import Retries
from craftai.web.errors import bad_request, error_body, error_response
from craftai.web.settings import WebSettings
from craftai.web.uploads import BodyLimit, read_upload
from craftai_wire.v1 import common_pb2

log = logging.getLogger("craftai.web")
API = "/api/v1"
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
PICTURE_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {
                    "picture": {"type": "string", "format": "binary", "description": "PNG, JPEG, WebP or binary PPM"}
                },
                "required": ["picture"],
            }
        },
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        "image/png": {"schema": {"type": "string", "format": "binary"}},
        "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
        "image/webp": {"schema": {"type": "string", "format": "binary"}},
    },
}
MATTE_BODY = {
    **PICTURE_BODY,
    "content": {
        **PICTURE_BODY["content"],  # type: ignore[dict-item]
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {
                    "picture": {"type": "string", "format": "binary", "description": "PNG, JPEG, WebP or binary PPM"},
                    "background": {"type": "string", "format": "binary", "description": "the composite's"},
                },
                "required": ["picture"],
            }
        },
    },
}
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": words}
    for status, words in (
        (400, "a bad picture, prompt or option"),
        (401, "no app key"),
        (403, "a key that is not the app's"),
        (404, "unknown session, feature, recipe or engine"),
        (409, "the route is not set up"),
        (413, "the upload or the picture is too large"),
        (429, "the app's limits (Retry-After)"),
        (503, "the services are draining or down (Retry-After)"),
    )
}
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


# -- request and answer models (the OpenAPI schema) -------------------------------------------


class PointIn(BaseModel):
    """A click in picture pixels (x right, y down, origin top-left); background when not foreground."""

    x: float
    y: float
    foreground: bool = True


class PromptIn(BaseModel):
    """One object's prompt: clicks, a box, a previous answer's low-res logits (base64)."""

    points: list[PointIn | tuple[float, float] | tuple[float, float, bool]] = Field(
        default_factory=list, description="[{x, y, foreground}] or [[x, y, foreground]]"
    )
    box: tuple[float, float, float, float] | None = Field(None, description="[x0, y0, x1, y1]: top-left, bottom-right")
    mask_input: str | None = Field(None, description="a previous answer's low_res, base64, to refine")
    all_masks: bool = False
    single_mask_like_meta: bool = False


class SegmentIn(PromptIn):
    """A prompt (the fields above) or several objects (`prompts`), and the answer's formats."""

    prompts: list[PromptIn] | None = Field(None, description="several objects in one call (instead of the above)")
    formats: list[Literal["png", "rle", "polygons"]] | None = Field(None, description="default: png")
    polygon_tolerance: float | None = None
    max_hole_area: int = 0
    max_sprinkle_area: int = 0
    low_res: bool = Field(False, description="answer each mask's low-res logits (base64) to send back as mask_input")


class EverythingIn(BaseModel):
    """Meta's automatic mask generator's parameters (unset: its defaults) and the answer's formats."""

    points_per_side: int | None = Field(None, description="a grid of n x n single clicks (32)")
    points_per_batch: int | None = Field(None, description="clicks decoded at once (64); progress after each batch")
    pred_iou_thresh: float | None = Field(None, description="keep masks whose predicted IoU is above (0.8)")
    stability_score_thresh: float | None = Field(None, description="keep masks whose stability is above (0.95)")
    stability_score_offset: float | None = Field(None, description="the stability score's logit offset (1.0)")
    mask_threshold: float | None = Field(None, description="the logit a pixel is selected above (0.0)")
    box_nms_thresh: float | None = Field(None, description="masks whose boxes overlap more are one (0.7)")
    min_mask_region_area: int | None = Field(None, description="holes and islands smaller are removed (0: off)")
    formats: list[Literal["png", "rle", "polygons"]] | None = Field(None, description="default: rle")
    polygon_tolerance: float | None = None

    def options(self) -> dict[str, Any]:
        """The parameters given, by name (the services check their ranges)."""
        return self.model_dump(exclude={"formats", "polygon_tolerance"}, exclude_none=True)


class SetupIn(BaseModel):
    feature: str = Field(description="image.matte or image.segment")
    recipe: str | None = None
    engine: str | None = None


# -- conversions (no feature logic: the SDK's types to JSON and back) -------------------------


def _message(message: Message) -> dict[str, Any]:
    return MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def _event(message: Message) -> dict[str, Any]:
    """An event of a stream as JSON; a Progress's counts as numbers (proto JSON writes 64-bit
    integers as strings)."""
    if isinstance(message, common_pb2.Progress):
        return {f: getattr(message, f) for f in ("stage", "done", "total", "unit", "message")}
    return _message(message)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _logits(text: str | None, field: str) -> LowResMask | None:
    if text is None:
        return None
    try:
        return LowResMask(base64.b64decode(text, validate=True))
    except ValueError:
        raise bad_request("mask_input is the base64 of a previous answer's low_res", field=field) from None


def _points(given: PromptIn) -> list[Point]:
    return [Point(*p) if isinstance(p, tuple) else Point(p.x, p.y, p.foreground) for p in given.points]


def _mask(mask: MaskOutput, low_res: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "prompt_index": mask.prompt_index,
        "predicted_iou": mask.predicted_iou,
        "empty": mask.empty,
        "selected_fraction": mask.selected_fraction,
        "box": list(mask.box),
        "area": mask.area,
    }
    if mask.png:
        answer["png"] = _b64(mask.png)
    if mask.rle is not None:
        answer["rle"] = mask.rle.to_coco()
    if mask.polygons:
        answer["polygons"] = [
            {"outer": [v for xy in p.outer for v in xy], "holes": [[v for xy in h for v in xy] for h in p.holes]}
            for p in mask.polygons
        ]
    if low_res:
        answer["low_res"] = _b64(mask.low_res.logits)
    return answer


def _answered(result: MatteOutput | SegmentOutput | EverythingOutput) -> dict[str, Any]:
    """What every feature's JSON answer says besides its outputs: the picture's size, the route
    and device that answered, the server's stages, notices and the request's id."""
    return {
        "width": result.width,
        "height": result.height,
        "recipe": result.recipe,
        "engine": result.engine,
        "device": result.device,
        "timing_ms": result.timing_ms,
        "notices": result.notices,
        "request_id": result.request_id,
    }


def _xy(point: Point | None) -> list[float] | None:
    return None if point is None else [point.x, point.y]


def _everything(result: EverythingOutput) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        **_answered(result),
        "points": result.points,
        "candidates": result.candidates,
        "masks": [
            _mask(m, False) | {"stability_score": m.stability_score, "point": _xy(m.point)} for m in result.masks
        ],
    }


def _route_headers(recipe: str, engine: str, device: str, timing: dict[str, float], request_id: str) -> dict[str, str]:
    return {
        "X-Craftai-Recipe": recipe,
        "X-Craftai-Engine": engine,
        "X-Craftai-Device": device,
        "X-Request-Id": request_id,
        "Server-Timing": ", ".join(f"{name};dur={ms:.1f}" for name, ms in timing.items()),
    }


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _number(value: object, field: str, kind: type[float] | type[int]) -> Any:
    """A query or form value as a number (the SDK checks its range)."""
    text = _text(value)
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        raise bad_request(f"{field} is a number; got {text!r}", field=field) from None


def _formats(text: str | None) -> str | dict[str, str] | None:
    """`png` for every output, or `composite:jpeg,matte:webp` one per output (the SDK's format)."""
    if text is None or ":" not in text:
        return text
    pairs = [part.split(":", 1) for part in text.split(",") if part.strip()]
    return {name.strip(): fmt.strip() for name, fmt in pairs}


def _wants_json(request: Request, answer: str | None) -> bool:
    if answer is not None:
        return answer == "json"
    return "application/json" in request.headers.get("accept", "")


# -- the app -----------------------------------------------------------------------------------


def _credentials(request: Request, default_app_id: str) -> tuple[str, str | None]:
    """The caller's app id (Craftai-App-Id, else the gateway's default) and key (Authorization:
    Bearer <key>, else Craftai-App-Key); none is made up: a call without a key goes without one."""
    key: str | None = None
    authorization = request.headers.get("authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise CraftAiError(UNAUTHENTICATED, "the Authorization header is 'Bearer <app key>'", "MISSING_APP_KEY")
        key = token.strip()
    key = key or request.headers.get("craftai-app-key") or None
    app_id = request.headers.get("craftai-app-id") or default_app_id
    for value in (app_id, key or ""):
        if not (value.isascii() and value.isprintable()):
            raise CraftAiError(UNAUTHENTICATED, "app ids and keys are printable ASCII", "BAD_APP_ID")
    return app_id, key


async def caller(request: Request) -> AsyncAiClient:
    """The services as the caller's app (its id and key), on the gateway's channels."""
    app_id, key = _credentials(request, request.app.state.settings.app_id)
    root: AsyncAiClient = request.app.state.root
    return root.for_app(app_id, key)


Caller = Annotated[AsyncAiClient, Depends(caller)]


def build(settings: WebSettings | None = None) -> FastAPI:
    """The gateway's ASGI app: the API under /api/v1, the page at /."""
    settings = settings or WebSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        retries = Retries(wait_seconds=settings.retry_seconds)
        async with AsyncAiClient(
            app_id=settings.app_id, target=settings.target, infer=settings.infer, retries=retries
        ) as root:
            app.state.root = root
            yield

    app = FastAPI(
        title="craft-ai services: HTTP API",
        version="1",
        description="Remove backgrounds and select objects over HTTP; the same services, keys and limits as gRPC.",
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # Swagger UI loads its script from a CDN: the schema is served, the UI is not
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings

    @app.exception_handler(CraftAiError)
    async def craftai_error(request: Request, exc: CraftAiError) -> Response:
        return error_response(exc)

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError) -> Response:
        return error_response(bad_request(str(exc)))  # the SDK's own checks of options, in its words

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return error_response(
            bad_request(f"{where or 'the request'}: {first.get('msg', 'not understood')}", field=where)
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        reason = {413: "UPLOAD_TOO_LARGE", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "")
        body = {"error": {"status": exc.status_code, "code": "", "reason": reason, "message": str(exc.detail)}}
        return JSONResponse(
            body, status_code=exc.status_code, headers={"Connection": "close"} if exc.status_code == 413 else None
        )

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get(f"{API}/status", responses=ERRORS)
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
            advice[feature.name] = _message(resolved.proto)
        return {
            "runtime": _message(runtime.proto),
            "features": [_message(f.proto) for f in features],
            "routes": [_message(r.proto) for r in routes],
            "resolved": advice,
        }

    sse = {
        "description": "server-sent events: progress, notice, then result (or error)",
        "content": {"text/event-stream": {}},
    }
    everything_answers = {
        "description": "JSON: the masks; with Accept: text/event-stream, events progress, then result (or error)",
        "content": {"application/json": {}, "text/event-stream": {}},
    }

    @app.post(f"{API}/setup", responses={200: sse, **ERRORS})
    async def setup(body: SetupIn, ai: Caller) -> Response:
        """Download, verify and prepare a route: server-sent events `progress`, `notice`, then one
        `result` (or `error`). Leaving early never stops the preparation: the next call joins it."""
        events = ai.setup(body.feature, body.recipe, body.engine)
        try:
            first = await anext(events)  # an error before the first event is an HTTP error
        except CraftAiError:
            await events.aclose()
            raise

        async def sent() -> AsyncGenerator[str, None]:
            try:
                event: SetupEvent | None = first
                while event is not None:
                    wire = event.proto if isinstance(event, SetupOutput) else event
                    name = {"Progress": "progress", "Notice": "notice"}.get(wire.DESCRIPTOR.name, "result")
                    yield _sse(name, _event(wire))
                    event = await anext(events, None)
            except CraftAiError as exc:
                yield _sse("error", error_body(exc)["error"])
            finally:
                await events.aclose()

        return _event_stream(sent())

    @app.post(f"{API}/remove-background", openapi_extra={"requestBody": MATTE_BODY}, responses=ERRORS)
    async def remove_background(
        request: Request,
        ai: Caller,
        *,
        outputs: Annotated[str, Query(description="any of matte, cutout, composite, mask: 'matte,cutout'")] = "cutout",
        naive: Annotated[bool, Query(description="cutout and composite: the picture's own colours")] = False,
        bg_color: Annotated[str | None, Query(description="the composite over #rrggbb[aa] or r,g,b[,a]")] = None,
        bg_blur: Annotated[float | None, Query(description="the composite over the picture blurred, in pixels")] = None,
        threshold: Annotated[float | None, Query(description="the mask: alpha above this share (0.5)")] = None,
        format: Annotated[
            str | None,
            Query(description="png, webp or jpeg (composite), or per output: composite:jpeg,matte:webp"),
        ] = None,
        png_level: int | None = None,
        jpeg_quality: int | None = None,
        recipe: str | None = None,
        engine: str | None = None,
        answer: Annotated[
            Literal["image", "json"] | None, Query(description="image bytes (one output) or JSON (default: Accept)")
        ] = None,
    ) -> Response:
        """Remove the background of a picture (multipart field `picture`, or the raw body; the
        composite's background picture as the multipart field `background`). The options are the
        SDK's remove_background's (a form's text fields may give them too). One output: its image
        bytes with their content type; several, or `answer=json` / Accept: application/json: JSON
        with each output base64."""
        upload = await read_upload(request)
        given = {
            "outputs": outputs,
            "naive": str(naive).lower(),
            "bg_color": bg_color,
            "bg_blur": bg_blur,
            "threshold": threshold,
            "format": format,
            "png_level": png_level,
            "jpeg_quality": jpeg_quality,
            "recipe": recipe,
            "engine": engine,
            "answer": answer,
        } | upload.fields
        names = [n.strip() for n in str(given["outputs"]).split(",") if n.strip()]
        result = await ai.remove_background(
            upload.picture,
            outputs=names,
            naive=str(given["naive"]).lower() in ("true", "1", "yes", "on"),
            bg_color=_text(given["bg_color"]),
            bg_blur=_number(given["bg_blur"], "bg_blur", float),
            bg_image=upload.files.get("background"),
            threshold=_number(given["threshold"], "threshold", float),
            format=_formats(_text(given["format"])),
            png_level=_number(given["png_level"], "png_level", int),
            jpeg_quality=_number(given["jpeg_quality"], "jpeg_quality", int),
            recipe=_text(given["recipe"]),
            engine=_text(given["engine"]),
        )
        images = result.images
        headers = _route_headers(result.recipe, result.engine, result.device, result.timing_ms, result.request_id)
        headers |= {"X-Craftai-Width": str(result.width), "X-Craftai-Height": str(result.height)}
        if len(images) == 1 and not _wants_json(request, _text(given["answer"])):
            ((name, image),) = images.items()
            headers["Content-Disposition"] = f'inline; filename="{name}{image.suffix}"'
            return Response(image.data, media_type=image.media_type, headers=headers)
        return JSONResponse(
            {
                **_answered(result),
                "outputs": {
                    name: {
                        "format": image.format,
                        "media_type": image.media_type,
                        "has_alpha": image.has_alpha,
                        "data": _b64(image.data),
                    }
                    for name, image in images.items()
                },
            },
            headers=headers,
        )

    @app.post(f"{API}/sessions", status_code=201, openapi_extra={"requestBody": PICTURE_BODY}, responses=ERRORS)
    async def open_session(
        request: Request, ai: Caller, recipe: str | None = None, engine: str | None = None
    ) -> JSONResponse:
        """Open a segment session on a picture (the image encoder runs now): its id and size."""
        upload = await read_upload(request)
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
        headers = {"Location": f"{API}/sessions/{session.session_id}"}
        return JSONResponse(body, status_code=201, headers=headers)

    @app.post(f"{API}/sessions/{{session_id}}/segment", responses=ERRORS)
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
                    points=_points(p),
                    box=p.box,
                    mask_input=_logits(p.mask_input, f"prompts.{i}.mask_input"),
                    all_masks=p.all_masks,
                    single_mask_like_meta=p.single_mask_like_meta,
                )
                for i, p in enumerate(body.prompts)
            ]
        result: SegmentOutput = await ai.resume_session(session_id).segment(
            points=_points(body),
            box=body.box,
            mask_input=_logits(body.mask_input, "mask_input"),
            all_masks=body.all_masks,
            prompts=several,
            formats=body.formats,
            polygon_tolerance=body.polygon_tolerance,
            max_hole_area=body.max_hole_area,
            max_sprinkle_area=body.max_sprinkle_area,
            single_mask_like_meta=body.single_mask_like_meta,
        )
        headers = _route_headers(result.recipe, result.engine, result.device, result.timing_ms, result.request_id)
        png_wanted = answer == "png" or (answer is None and "image/png" in request.headers.get("accept", ""))
        if png_wanted:
            best = result.best
            if not best.png:
                raise bad_request("answer=png needs the png format among the formats asked", field="formats")
            headers |= {
                "X-Craftai-Predicted-Iou": f"{best.predicted_iou:.6f}",
                "X-Craftai-Empty": "true" if best.empty else "false",
                "X-Craftai-Selected-Fraction": f"{best.selected_fraction:.6f}",
            }
            return Response(best.png, media_type="image/png", headers=headers)
        return JSONResponse(
            {
                "session_id": session_id,
                **_answered(result),
                "masks": [_mask(m, body.low_res) for m in result.masks],
            },
            headers=headers,
        )

    @app.post(f"{API}/sessions/{{session_id}}/everything", responses={200: everything_answers, **ERRORS})
    async def segment_everything(session_id: str, body: EverythingIn, request: Request, ai: Caller) -> Response:
        """Every object of the session's picture (Meta's automatic mask generator: a grid of single
        clicks, filtered, de-duplicated), best predicted IoU first, masks as RLE unless `formats`
        says otherwise. With Accept: text/event-stream: server-sent events `progress` (after each
        batch of clicks), then one `result` (the JSON answer) or `error`."""
        session = ai.resume_session(session_id)

        def call(on_progress: Callable[[common_pb2.Progress], None] | None) -> Awaitable[EverythingOutput]:
            return session.segment_everything(
                formats=body.formats,
                polygon_tolerance=body.polygon_tolerance,
                on_progress=on_progress,
                **body.options(),
            )

        if "text/event-stream" not in request.headers.get("accept", ""):
            result = await call(None)
            headers = _route_headers(result.recipe, result.engine, result.device, result.timing_ms, result.request_id)
            return JSONResponse(_everything(result), headers=headers)
        return await _progress_stream(call, _everything)

    @app.delete(f"{API}/sessions/{{session_id}}", status_code=204, responses=ERRORS)
    async def close_session(session_id: str, ai: Caller) -> Response:
        """Forget the session's picture on the server (nothing happens if it is already gone)."""
        await ai.resume_session(session_id).close()
        return Response(status_code=204)

    static = resources.files("craftai.web") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return Response((static / "index.html").read_bytes(), media_type="text/html; charset=utf-8")

    app.add_middleware(BodyLimit, limit=settings.max_upload_bytes)
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Craftai-App-Id", "Craftai-App-Key"],
            expose_headers=EXPOSED_HEADERS,
        )
    return app


ResultT = TypeVar("ResultT")


async def _progress_stream(
    call: Callable[[Callable[[common_pb2.Progress], None]], Awaitable[ResultT]],
    answer: Callable[[ResultT], dict[str, Any]],
) -> Response:
    """A call's progress as server-sent events, then its `result` (`answer` of its value) or
    `error`. An error before the first progress is an HTTP error; a caller that leaves cancels
    the call (the services stop the work)."""
    progress: asyncio.Queue[common_pb2.Progress] = asyncio.Queue()
    task = asyncio.ensure_future(call(progress.put_nowait))

    async def next_event() -> common_pb2.Progress | None:
        """The next progress, or None once the call has ended and every progress was sent."""
        while progress.empty() and not task.done():
            getter = asyncio.ensure_future(progress.get())
            await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                return getter.result()
            getter.cancel()
        return None if progress.empty() else progress.get_nowait()

    try:
        first = await next_event()
        if first is None and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    except BaseException:
        task.cancel()
        raise

    async def sent() -> AsyncGenerator[str, None]:
        try:
            event = first
            while event is not None:
                yield _sse("progress", _event(event))
                event = await next_event()
            try:
                yield _sse("result", answer(task.result()))
            except CraftAiError as exc:
                yield _sse("error", error_body(exc)["error"])
        finally:
            task.cancel()

    return _event_stream(sent())


def _event_stream(events: AsyncGenerator[str, None]) -> StreamingResponse:
    """Server-sent events as they come (no cache, no proxy buffering)."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def _sse(event: str, data: dict[str, Any]) -> str:
    """One server-sent event (JSON has no newline, so one data line)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
