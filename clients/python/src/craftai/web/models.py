"""What the HTTP API takes and documents: the JSON request bodies (pydantic models) and the parts of
the OpenAPI schema that FastAPI cannot see (a picture sent raw or as a form, the error statuses)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from craftai_wire.vocabulary import CutoutAction

PICTURE_BODY: dict[str, Any] = {
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
MATTE_BODY: dict[str, Any] = {
    **PICTURE_BODY,
    "content": {
        **PICTURE_BODY["content"],
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
STATUS_WORDS = {
    400: "a bad picture, prompt or option, a parameter the endpoint does not take (UNKNOWN_PARAMETER), a body "
    "the gateway cannot read (BAD_REQUEST)",
    401: "no app key: send 'Authorization: Bearer <app key>' (WWW-Authenticate says so)",
    403: "a key that is not the app's",
    404: "an unknown session, feature, recipe or engine",
    408: "the request's headers or body came too slowly",
    409: "the route is not set up (POST /api/v1/setup)",
    412: "the recipe is unavailable, or its files or preparation were refused",
    413: "the upload or the picture is too large",
    429: "the app's limits (Retry-After)",
    431: "the request's headers are too large",
    500: "an error of the gateway or the services (INTERNAL)",
    502: "every download source of a pinned file failed (SOURCES_FAILED)",
    503: "the services are draining or down, or the gateway holds too many uploads (Retry-After)",
    504: "a deadline passed",
    507: "the store's disk is full (NO_SPACE)",
}
COMMON = (400, 401, 403, 408, 429, 431, 500, 503, 504)  # what any call may be answered


class ErrorDetail(BaseModel):
    """An error: the status, the gRPC code name, the reason for programs and the message for people."""

    status: int
    code: str = Field(description="the gRPC status code's name: INVALID_ARGUMENT, NOT_FOUND, …")
    reason: str = Field(description="craftai_wire.vocabulary's Reason or GatewayReason: ROUTE_NOT_SET_UP, …")
    message: str
    violations: list[dict[str, str]] = Field(default_factory=list, description="[{field, description}]")
    metadata: dict[str, str] = Field(default_factory=dict)
    request_id: str = ""


class ErrorAnswer(BaseModel):
    """Every error's JSON (docs/WEB.md, Errors)."""

    error: ErrorDetail


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error statuses an endpoint answers (COMMON and `statuses`), each with the error's schema."""
    return {
        status: {"description": STATUS_WORDS[status], "model": ErrorAnswer} for status in sorted({*COMMON, *statuses})
    }


EVENT_STREAM = {
    "description": "server-sent events: progress, notice, then result (or error)",
    "content": {"text/event-stream": {}},
}
EVERYTHING_ANSWERS = {
    "description": "JSON: the masks; with Accept: text/event-stream, events progress, then result (or error)",
    "content": {"application/json": {}, "text/event-stream": {}},
}


class Strict(BaseModel):
    """A JSON body whose unknown fields are refused, named (craftai.web.parameters), not ignored."""

    model_config = ConfigDict(extra="forbid")


class PointIn(Strict):
    """A click in picture pixels (x right, y down, origin top-left); background when not foreground."""

    x: float
    y: float
    foreground: bool = True


class PromptIn(Strict):
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


class CutoutPromptIn(Strict):
    """A keep or remove prompt: the region SAM finds from clicks and/or a box."""

    action: CutoutAction = Field(description="keep: the region is subject; remove: it is background")
    points: list[PointIn | tuple[float, float] | tuple[float, float, bool]] = Field(
        default_factory=list, description="[{x, y, foreground}] or [[x, y(, foreground)]]"
    )
    box: tuple[float, float, float, float] | None = Field(None, description="[x0, y0, x1, y1]: top-left, bottom-right")


class CutoutIn(Strict):
    """Every prompt so far, in order (the answer is a function of this list)."""

    prompts: list[CutoutPromptIn] = Field(default_factory=list)


class EverythingIn(Strict):
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


class SetupIn(Strict):
    feature: str = Field(description="image.matte or image.segment")
    recipe: str | None = None
    engine: str | None = None
