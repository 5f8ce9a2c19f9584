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

from craftai.outputs import LowResMask, MaskInput, Point, PointLike
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
    picture: bytes, asked: infer_pb2.Prompt, recipe: str | None = None, engine: str | None = None
) -> infer_pb2.SegmentOnceRequest:
    return infer_pb2.SegmentOnceRequest(
        route=route_ref(SEGMENT_FEATURE, recipe, engine), picture=common_pb2.Picture(data=picture), prompt=asked
    )
