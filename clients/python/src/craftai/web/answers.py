"""The SDK's types as JSON and headers, and the HTTP request's values as the SDK's arguments: no
feature logic (the SDK and the services check every option and answer in their words)."""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from starlette.requests import Request

from craftai.outputs import EverythingOutput, LowResMask, MaskOutput, MatteOutput, Point, SegmentOutput
from craftai.web.errors import bad_request
from craftai.web.models import CutoutPromptIn, PromptIn
from craftai_wire.v1 import common_pb2


def message(value: Message) -> dict[str, Any]:
    return MessageToDict(value, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def event(value: Message) -> dict[str, Any]:
    """An event of a stream as JSON; a Progress's counts as numbers (proto JSON writes 64-bit
    integers as strings)."""
    if isinstance(value, common_pb2.Progress):
        return {f: getattr(value, f) for f in ("stage", "done", "total", "unit", "message")}
    return message(value)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def logits(text: str | None, field: str) -> LowResMask | None:
    if text is None:
        return None
    try:
        return LowResMask(base64.b64decode(text, validate=True))
    except ValueError:
        raise bad_request("mask_input is the base64 of a previous answer's low_res", field=field) from None


def points(given: PromptIn | CutoutPromptIn) -> list[Point]:
    return [Point(*p) if isinstance(p, tuple) else Point(p.x, p.y, p.foreground) for p in given.points]


def mask(found: MaskOutput, low_res: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "prompt_index": found.prompt_index,
        "predicted_iou": found.predicted_iou,
        "empty": found.empty,
        "selected_fraction": found.selected_fraction,
        "box": list(found.box),
        "area": found.area,
    }
    if found.png:
        answer["png"] = b64(found.png)
    if found.rle is not None:
        answer["rle"] = found.rle.to_coco()
    if found.polygons:
        answer["polygons"] = [
            {"outer": [v for xy in p.outer for v in xy], "holes": [[v for xy in h for v in xy] for h in p.holes]}
            for p in found.polygons
        ]
    if low_res:
        answer["low_res"] = b64(found.low_res.logits)
    return answer


def answered(result: MatteOutput | SegmentOutput | EverythingOutput) -> dict[str, Any]:
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


def everything(result: EverythingOutput) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        **answered(result),
        "points": result.points,
        "candidates": result.candidates,
        "masks": [mask(m, False) | {"stability_score": m.stability_score, "point": _xy(m.point)} for m in result.masks],
    }


def route_headers(result: MatteOutput | SegmentOutput | EverythingOutput) -> dict[str, str]:
    return {
        "X-Craftai-Recipe": result.recipe,
        "X-Craftai-Engine": result.engine,
        "X-Craftai-Device": result.device,
        "X-Request-Id": result.request_id,
        "Server-Timing": ", ".join(f"{name};dur={ms:.1f}" for name, ms in result.timing_ms.items()),
    }


def text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def number(value: object, field: str, kind: type[float] | type[int]) -> Any:
    """A query or form value as a number (the SDK checks its range)."""
    given = text(value)
    if given is None:
        return None
    try:
        return kind(given)
    except ValueError:
        raise bad_request(f"{field} is a number; got {given!r}", field=field) from None


def formats(given: str | None) -> str | dict[str, str] | None:
    """`png` for every output, or `composite:jpeg,matte:webp` one per output (the SDK's format)."""
    if given is None or ":" not in given:
        return given
    pairs = [part.split(":", 1) for part in given.split(",") if part.strip()]
    return {name.strip(): fmt.strip() for name, fmt in pairs}


def wants(request: Request, answer: str | None, asked: str, media_type: str) -> bool:
    """Whether the caller asked for `asked` (`answer=`), or else accepts `media_type`."""
    if answer is not None:
        return answer == asked
    return media_type in request.headers.get("accept", "")
