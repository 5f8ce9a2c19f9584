"""POST /api/v1/remove-background: the SDK's remove_background over HTTP. Its options
(`matte_query`), how they become the SDK's arguments (`matte_arguments`) and how the outputs are
answered (`outputs_answer`) are the cutouts' and the frame stream's too (craftai.web.routes.cutouts,
.frames).

Raw pixels (the SDK's format "raw") are refused here (400, field `format`): an HTTP answer is an
image a browser, the page or a tool opens by its media type, and raw bytes carry no size; the page
offers PNG, WebP and JPEG alone (static/index.html)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from craftai.outputs import MatteOutput
from craftai.web.answers import answered, b64, formats, number, route_headers, text, wants
from craftai.web.callers import Caller
from craftai.web.errors import bad_request
from craftai.web.models import MATTE_BODY, errors
from craftai.web.parameters import known_query, query_names, refuse_unknown
from craftai.web.routes import API
from craftai.web.uploads import PICTURE_FIELDS, Upload, read_upload
from craftai_wire.vocabulary import ImageFormat

router = APIRouter(prefix=API, dependencies=[Depends(known_query)])
FILE_FIELDS = frozenset({"background", *PICTURE_FIELDS})
TRUE = ("true", "1", "yes", "on")
Answer = Annotated[
    Literal["image", "json"] | None, Query(description="image bytes (one output) or JSON (default: Accept)")
]


def matte_query(
    *,
    outputs: Annotated[
        str | None,
        Query(
            description="any of matte, cutout, composite, mask: 'matte,cutout'. Unset: the cutout; the composite "
            "instead with a background, the mask with a threshold (the SDK's and the command's default)"
        ),
    ] = None,
    naive: Annotated[bool, Query(description="cutout and composite: the picture's own colours")] = False,
    bg_color: Annotated[str | None, Query(description="the composite over #rrggbb[aa] or r,g,b[,a]")] = None,
    bg_blur: Annotated[float | None, Query(description="the composite over the picture blurred, in pixels")] = None,
    threshold: Annotated[float | None, Query(description="the mask: alpha above this share (0.5)")] = None,
    format: Annotated[
        str | None,
        Query(
            description="png, webp or jpeg (composite), or per output: composite:jpeg,matte:webp (raw pixels are "
            "the gRPC API's and the SDK's: refused here)"
        ),
    ] = None,
    png_level: int | None = None,
    jpeg_quality: int | None = None,
    part: Annotated[
        str | None,
        Query(
            description="a recipe with parts (u2net_cloth_seg: upper, lower or full): that part's matte alone; "
            "unset: every part's, stacked top to bottom"
        ),
    ] = None,
    recipe: str | None = None,
    engine: str | None = None,
) -> dict[str, object]:
    """The matte's options as query parameters (a form's text fields may give them too)."""
    return {
        "outputs": outputs,
        "naive": str(naive).lower(),
        "bg_color": bg_color,
        "bg_blur": bg_blur,
        "threshold": threshold,
        "format": format,
        "png_level": png_level,
        "jpeg_quality": jpeg_quality,
        "part": part,
        "recipe": recipe,
        "engine": engine,
    }


MatteQuery = Annotated[dict[str, object], Depends(matte_query)]


async def matte_upload(request: Request, query: dict[str, object]) -> tuple[Upload, dict[str, object]]:
    """The picture (and background) uploaded, and the options: the query's, then the form's text
    fields; a field or file the endpoint does not take is refused."""
    upload = await read_upload(request)
    refuse_unknown(upload.fields, query_names(request.scope["route"]), "form field")
    refuse_unknown(upload.files, FILE_FIELDS, "file field")
    return upload, query | upload.fields


def http_formats(given: str | None) -> str | dict[str, str] | None:
    """The SDK's format from the query's (`formats`); raw refused in words saying what to use."""
    chosen = formats(given)
    named = [chosen] if isinstance(chosen, str) else list((chosen or {}).values())
    if any(name.strip().lower() == ImageFormat.RAW for name in named):
        raise bad_request(
            "format raw (the pixels alone, with no size or header) is not answered over HTTP, whose answers are "
            "images a browser or a tool opens: ask for png (lossless: the same pixels) or webp; raw pixels are for "
            "the gRPC API and the Python SDK (format='raw', then each output's array())",
            field="format",
        )
    return chosen


def matte_arguments(given: dict[str, object], upload: Upload) -> dict[str, Any]:
    """remove_background's keyword arguments (and open_cutout's) from the options given."""
    asked = text(given["outputs"])
    return {
        "outputs": None if asked is None else [n.strip() for n in asked.split(",") if n.strip()],
        "naive": str(given["naive"]).lower() in TRUE,
        "bg_color": text(given["bg_color"]),
        "bg_blur": number(given["bg_blur"], "bg_blur", float),
        "bg_image": upload.files.get("background"),
        "threshold": number(given["threshold"], "threshold", float),
        "format": http_formats(text(given["format"])),
        "png_level": number(given["png_level"], "png_level", int),
        "jpeg_quality": number(given["jpeg_quality"], "jpeg_quality", int),
        "part": text(given["part"]),
        "recipe": text(given["recipe"]),
        "engine": text(given["engine"]),
    }


def outputs_answer(
    request: Request,
    result: MatteOutput,
    answer: str | None,
    *,
    more: dict[str, Any] | None = None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """One output: its image bytes with their content type (unless JSON is asked); several, or
    `answer=json` / Accept: application/json: JSON with each output base64 (and `more`)."""
    images = result.images
    sent = (headers or {}) | route_headers(result)
    sent |= {"X-Craftai-Width": str(result.width), "X-Craftai-Height": str(result.height)}
    if len(images) == 1 and not wants(request, answer, "json", "application/json"):
        ((name, image),) = images.items()
        sent["Content-Disposition"] = f'inline; filename="{name}{image.suffix}"'
        return Response(image.data, status_code=status_code, media_type=image.media_type, headers=sent)
    outputs_json = {
        name: {
            "format": image.format,
            "media_type": image.media_type,
            "has_alpha": image.has_alpha,
            "data": b64(image.data),
        }
        for name, image in images.items()
    }
    body = {**(more or {}), **answered(result), "outputs": outputs_json}
    return JSONResponse(body, status_code=status_code, headers=sent)


@router.post("/remove-background", openapi_extra={"requestBody": MATTE_BODY}, responses=errors(404, 409, 412, 413))
async def remove_background(request: Request, ai: Caller, query: MatteQuery, answer: Answer = None) -> Response:
    """Remove the background of a picture (multipart field `picture`, or the raw body; the
    composite's background picture as the multipart field `background`). The options are the
    SDK's remove_background's (a form's text fields may give them too), with its default outputs:
    the cutout; the composite instead when a background is given, the mask when a threshold is.
    A parameter it does not take is refused (400 UNKNOWN_PARAMETER), not ignored. One output: its image
    bytes with their content type; several, or `answer=json` / Accept: application/json: JSON
    with each output base64."""
    upload, given = await matte_upload(request, {**query, "answer": answer})
    result = await ai.remove_background(upload.picture, **matte_arguments(given, upload))
    return outputs_answer(request, result, text(given["answer"]))
