"""What the SDK asks: the RPCs it calls (service, name, deadline, answer type) and pure functions
that build their requests from an app's arguments. No I/O here but reading a picture file, so that
the blocking client and an asyncio client build the very same requests."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar

from google.protobuf.message import Message

from craftai.outputs import LowResMask, MaskInput, Point, PointLike, Prompt, format_codes
from craftai_wire.v1 import catalogue_pb2, common_pb2, infer_pb2, prepare_pb2

Picture = bytes | str | os.PathLike[str]
ServiceName = Literal["catalogue", "prepare", "infer"]
RequestT = TypeVar("RequestT", bound=Message)
AnswerT = TypeVar("AnswerT", bound=Message)
MATTE_FEATURE = "image.matte"
SEGMENT_FEATURE = "image.segment"


@dataclass(frozen=True)
class Unary(Generic[RequestT, AnswerT]):
    """A unary RPC: the service that answers it, its method name on the stubs, its response type.
    It runs under `Deadlines.unary`."""

    service: ServiceName
    name: str
    request: type[RequestT]
    answer: type[AnswerT]


@dataclass(frozen=True)
class Stream(Generic[RequestT, AnswerT]):
    """A server stream of progress and notices ending with one result of type `answer`; it runs
    under `Deadlines.inference` or `Deadlines.setup` (`deadline`)."""

    service: ServiceName
    name: str
    request: type[RequestT]
    answer: type[AnswerT]
    deadline: Literal["inference", "setup"]


LIST_FEATURES = Unary(
    "catalogue", "ListFeatures", catalogue_pb2.ListFeaturesRequest, catalogue_pb2.ListFeaturesResponse
)
RESOLVE_ROUTE = Unary(
    "catalogue", "ResolveRoute", catalogue_pb2.ResolveRouteRequest, catalogue_pb2.ResolveRouteResponse
)
GET_ROUTE_STATES = Unary(
    "catalogue", "GetRouteStates", catalogue_pb2.GetRouteStatesRequest, catalogue_pb2.GetRouteStatesResponse
)
SETUP = Stream("prepare", "Setup", prepare_pb2.SetupRequest, prepare_pb2.SetupResult, "setup")
GET_RUNTIME = Unary("infer", "GetRuntime", infer_pb2.GetRuntimeRequest, infer_pb2.Runtime)
MATTE = Stream("infer", "Matte", infer_pb2.MatteRequest, infer_pb2.MatteResult, "inference")
OPEN_SESSION = Stream("infer", "OpenSession", infer_pb2.OpenSessionRequest, infer_pb2.OpenSessionResult, "inference")
SEGMENT = Stream("infer", "Segment", infer_pb2.SegmentRequest, infer_pb2.SegmentResult, "inference")
SEGMENT_ONCE = Stream("infer", "SegmentOnce", infer_pb2.SegmentOnceRequest, infer_pb2.SegmentResult, "inference")
SEGMENT_EVERYTHING = Stream(
    "infer", "SegmentEverything", infer_pb2.SegmentEverythingRequest, infer_pb2.SegmentEverythingResult, "inference"
)
# SegmentEverything's parameters: Meta's SAM2AutomaticMaskGenerator's names (docs/API.md).
EVERYTHING_OPTIONS = frozenset(infer_pb2.EverythingOptions.DESCRIPTOR.fields_by_name)
CLOSE_SESSION = Unary("infer", "CloseSession", infer_pb2.CloseSessionRequest, infer_pb2.CloseSessionResponse)


def read_picture(picture: Picture) -> bytes:
    """The picture's bytes: as given, or read from a path."""
    if isinstance(picture, bytes):
        return picture
    return Path(picture).read_bytes()


def route_ref(feature: str, recipe: str | None = None, engine: str | None = None) -> common_pb2.RouteRef:
    """A route as asked: the feature, and the recipe and engine when the app names them (else the
    catalogue's advice picks them)."""
    return common_pb2.RouteRef(feature=feature, recipe=recipe or "", engine=engine or "")


def prompt(
    points: Iterable[PointLike],
    box: Sequence[float] | None,
    mask_input: MaskInput,
    all_masks: bool,
    *,
    single_mask_like_meta: bool = False,
) -> infer_pb2.Prompt:
    """A segmentation prompt from points (Point or (x, y[, foreground])), a box (x0, y0, x1, y1)
    and a previous answer's low-res logits; a box that is not four numbers is refused here."""
    built = infer_pb2.Prompt(all_masks=all_masks, single_mask_like_meta=single_mask_like_meta)
    for point in points:
        p = point if isinstance(point, Point) else Point(*point)
        label = infer_pb2.POINT_LABEL_FOREGROUND if p.foreground else infer_pb2.POINT_LABEL_BACKGROUND
        built.points.append(infer_pb2.Point(x=p.x, y=p.y, label=label))
    if box is not None:
        if len(box) != 4:
            raise ValueError(f"a box is four numbers (x0, y0, x1, y1); got {len(box)}")
        x0, y0, x1, y1 = box
        built.box.CopyFrom(infer_pb2.Box(x0=x0, y0=y0, x1=x1, y1=y1))
    if mask_input is not None:
        low = mask_input if isinstance(mask_input, LowResMask) else LowResMask(bytes(mask_input))
        built.mask_input.CopyFrom(infer_pb2.LowResMask(logits=low.logits, width=low.width, height=low.height))
    return built


def prompts(
    points: Iterable[PointLike],
    box: Sequence[float] | None,
    mask_input: MaskInput,
    all_masks: bool,
    several: Sequence[Prompt] | None = None,
    *,
    single_mask_like_meta: bool = False,
) -> tuple[infer_pb2.Prompt | None, list[infer_pb2.Prompt]]:
    """A call's prompt (`prompt`) or its several objects' prompts (`prompts`), not both;
    `single_mask_like_meta` applies to every prompt of the call."""
    points = list(points)
    if several is None:
        return prompt(points, box, mask_input, all_masks, single_mask_like_meta=single_mask_like_meta), []
    if points or box is not None or mask_input is not None:
        raise ValueError("give points/box/mask_input for one object, or prompts=[...] for several, not both")
    if not several:
        raise ValueError("prompts is empty: give at least one Prompt")
    return None, [
        prompt(
            list(p.points),
            p.box,
            p.mask_input,
            p.all_masks or all_masks,
            single_mask_like_meta=p.single_mask_like_meta or single_mask_like_meta,
        )
        for p in several
    ]


def mask_output(
    formats: Iterable[str] | str | None,
    polygon_tolerance: float | None = None,
    max_hole_area: int = 0,
    max_sprinkle_area: int = 0,
) -> infer_pb2.MaskOutput:
    """What the call asks of its masks: formats by name ("png", "rle", "polygons"; None: the RPC's
    default), the polygons' tolerance in pixels, Meta's clean-up areas (low-res pixels)."""
    names = [formats] if isinstance(formats, str) else list(formats or ())
    built = infer_pb2.MaskOutput(
        formats=format_codes(names), max_hole_area=max_hole_area, max_sprinkle_area=max_sprinkle_area
    )
    if polygon_tolerance is not None:
        built.polygon_tolerance = polygon_tolerance
    return built


def segment_request(
    session_id: str, asked: tuple[infer_pb2.Prompt | None, list[infer_pb2.Prompt]], output: infer_pb2.MaskOutput
) -> infer_pb2.SegmentRequest:
    single, several = asked
    request = infer_pb2.SegmentRequest(session_id=session_id, prompts=several, output=output)
    if single is not None:
        request.prompt.CopyFrom(single)
    return request


def everything_request(
    session_id: str, options: dict[str, float | int | bool], output: infer_pb2.MaskOutput
) -> infer_pb2.SegmentEverythingRequest:
    """Options by Meta's parameter names; an unknown name is refused here (a typo would otherwise
    silently run with the default)."""
    unknown = sorted(set(options) - EVERYTHING_OPTIONS)
    if unknown:
        known = ", ".join(sorted(EVERYTHING_OPTIONS))
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; the options are {known}")
    request = infer_pb2.SegmentEverythingRequest(session_id=session_id, output=output)
    for name, value in options.items():
        setattr(request.options, name, value)
    return request


def resolve_request(
    feature: str, recipe: str | None = None, engine: str | None = None
) -> catalogue_pb2.ResolveRouteRequest:
    """No machine info: the catalogue asks the infer service what it runs on (engine advice is its
    to give, DESIGN.md section 2)."""
    return catalogue_pb2.ResolveRouteRequest(route=route_ref(feature, recipe, engine))


def setup_request(feature: str, recipe: str | None = None, engine: str | None = None) -> prepare_pb2.SetupRequest:
    """No gpu_available: prepare resolves through the catalogue, which asks the infer service."""
    return prepare_pb2.SetupRequest(route=route_ref(feature, recipe, engine))


def matte_request(
    picture: bytes, cutout: bool, recipe: str | None = None, engine: str | None = None
) -> infer_pb2.MatteRequest:
    return infer_pb2.MatteRequest(
        route=route_ref(MATTE_FEATURE, recipe, engine),
        picture=common_pb2.Picture(data=picture),
        want_cutout=cutout,
    )


def open_session_request(picture: bytes, recipe: str = "", engine: str = "") -> infer_pb2.OpenSessionRequest:
    return infer_pb2.OpenSessionRequest(
        route=route_ref(SEGMENT_FEATURE, recipe, engine), picture=common_pb2.Picture(data=picture)
    )


def segment_once_request(
    picture: bytes,
    asked: infer_pb2.Prompt | tuple[infer_pb2.Prompt | None, list[infer_pb2.Prompt]],
    recipe: str | None = None,
    engine: str | None = None,
    output: infer_pb2.MaskOutput | None = None,
) -> infer_pb2.SegmentOnceRequest:
    single, several = (asked, []) if isinstance(asked, infer_pb2.Prompt) else asked
    request = infer_pb2.SegmentOnceRequest(
        route=route_ref(SEGMENT_FEATURE, recipe, engine),
        picture=common_pb2.Picture(data=picture),
        prompts=several,
        output=output,
    )
    if single is not None:
        request.prompt.CopyFrom(single)
    return request
