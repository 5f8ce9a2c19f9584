"""The words both sides of the wire use: defined once here, imported by the services, the SDK, the
command line, the web gateway and (through the gateway) the page.

`Reason` is the machine-readable contract of every error (google.rpc.ErrorInfo.reason); docs/API.md
lists them with what a caller does about each; `GatewayReason` are the web gateway's own (HTTP
only; docs/WEB.md). `NoticeCode` names the notices a stream carries.
`Feature`, `Recipe` and `Engine` are the names a `RouteRef` carries as strings, `Part` the one a
MatteRequest's `part` carries (for the recipes in `PARTS_OF`). `Output`, `ImageFormat` and
`MaskFormat` are the names apps use (the SDK's arguments, the command line, HTTP) for what the
wire carries as enums; `OUTPUT_KINDS`, `IMAGE_FORMATS`, `MASK_FORMATS` and `CUTOUT_ACTIONS` are the one mapping
between the two, and `ROUTE_STATES` the same for a route's state. They are Python enums of
strings rather than proto enums because most of them travel as strings (feature, engine, reason,
notice) and the rest are what people type; each member is its own string (`Engine.TORCH ==
"torch"`), so a value read from the wire compares equal to its member.

tests/unit/test_vocabulary.py fails when a reason is spelled as a literal outside this package,
and when a table that must stay spelled elsewhere (a typing `Literal`, the recipe data, the proto
enums) disagrees with these.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from craftai_wire.v1 import catalogue_pb2, infer_pb2


class Reason(StrEnum):
    """Stable machine-readable reasons (google.rpc.ErrorInfo.reason); docs/API.md lists them."""

    MISSING_APP_ID = "MISSING_APP_ID"
    BAD_APP_ID = "BAD_APP_ID"
    MISSING_APP_KEY = "MISSING_APP_KEY"
    BAD_APP_KEY = "BAD_APP_KEY"
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"
    TOO_MANY_SESSIONS = "TOO_MANY_SESSIONS"
    TOO_MANY_STREAMS = "TOO_MANY_STREAMS"
    MEMORY_BUDGET = "MEMORY_BUDGET"
    OVER_BUDGET = "OVER_BUDGET"  # one request alone needs more than the whole budget: ask for less
    CALL_TIME_LIMIT = "CALL_TIME_LIMIT"
    STREAM_IDLE = "STREAM_IDLE"  # a frame stream's caller sent nothing for CRAFTAI_FRAMES_IDLE_SECONDS
    FIELD_TOO_LONG = "FIELD_TOO_LONG"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    UNKNOWN_FEATURE = "UNKNOWN_FEATURE"
    UNKNOWN_RECIPE = "UNKNOWN_RECIPE"
    UNKNOWN_ENGINE = "UNKNOWN_ENGINE"
    RECIPE_UNAVAILABLE = "RECIPE_UNAVAILABLE"
    ROUTE_NOT_SET_UP = "ROUTE_NOT_SET_UP"
    ENGINE_NOT_INSTALLED = "ENGINE_NOT_INSTALLED"
    BAD_PICTURE = "BAD_PICTURE"
    EMPTY_PICTURE = "EMPTY_PICTURE"
    PICTURE_TOO_LARGE = "PICTURE_TOO_LARGE"
    BAD_PROMPT = "BAD_PROMPT"
    TOO_MANY_POINTS = "TOO_MANY_POINTS"
    TOO_MANY_PROMPTS = "TOO_MANY_PROMPTS"
    BAD_OPTIONS = "BAD_OPTIONS"
    BAD_OUTPUT = "BAD_OUTPUT"  # image.matte: an output that cannot be made as asked
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SOURCES_FAILED = "SOURCES_FAILED"
    FILE_MISMATCH = "FILE_MISMATCH"
    PREPARATION_FAILED = "PREPARATION_FAILED"
    MODEL_REFUSED = "MODEL_REFUSED"
    NO_SPACE = "NO_SPACE"
    UNSAFE_STORE = "UNSAFE_STORE"
    STORE_PERMISSIONS = "STORE_PERMISSIONS"  # a store path this service may not read or write: the fix said
    CATALOGUE_UNREACHABLE = "CATALOGUE_UNREACHABLE"
    LIMIT_REACHED = "LIMIT_REACHED"
    INTERNAL = "INTERNAL"


class NoticeCode(StrEnum):
    """Notice.code: something a caller should know that is not an error (docs/API.md, "Streams")."""

    SOURCE_FAILED = "SOURCE_FAILED"  # a download source failed; the next one is tried
    FILE_MISMATCH = "FILE_MISMATCH"  # a file in the store was not the pinned one and is replaced
    FILE_ADOPTED = "FILE_ADOPTED"  # a pinned file another user placed by hand, made the service's own
    FILE_NOT_BROUGHT = "FILE_NOT_BROUGHT"  # the SDK's: a file of the route not under setup's from_path
    PREPARED_REFUSED = "PREPARED_REFUSED"  # a prepared folder did not match its manifest: prepared again
    PREPARED_UNVERIFIED = "PREPARED_UNVERIFIED"  # prepared, but a file to check it against was not on disk
    FELL_BACK_TO_CPU = "FELL_BACK_TO_CPU"  # the GPU failed; answered on the CPU, which the route keeps


class Feature(StrEnum):
    """RouteRef.feature: what a caller asks for."""

    MATTE = "image.matte"
    SEGMENT = "image.segment"


class Recipe(StrEnum):
    """RouteRef.recipe: the recipes of the packaged catalogue, by feature in `RECIPES_OF` (the
    command's help lists them; a catalogue of one's own, CRAFTAI_RECIPES, may name others, which
    the services take as any other)."""

    U2NETP = "u2netp"
    U2NET = "u2net"
    U2NET_HUMAN_SEG = "u2net_human_seg"
    U2NET_CLOTH_SEG = "u2net_cloth_seg"
    SILUETA = "silueta"
    ISNET_GENERAL_USE = "isnet-general-use"
    ISNET_ANIME = "isnet-anime"
    BIREFNET_GENERAL = "birefnet-general"
    BIREFNET_PORTRAIT = "birefnet-portrait"
    BIREFNET_DIS = "birefnet-dis"
    BIREFNET_HRSOD = "birefnet-hrsod"
    BIREFNET_COD = "birefnet-cod"
    BIREFNET_MASSIVE = "birefnet-massive"
    BRIA_RMBG = "bria-rmbg"
    INSPYRENET_SWINB = "inspyrenet-swinb"
    BIREFNET_LITE = "birefnet-lite"
    BIREFNET_HR = "birefnet-hr"
    BIREFNET_DYNAMIC = "birefnet-dynamic"
    SAM21_HIERA_TINY = "sam2.1-hiera-tiny"
    SAM2_HIERA_TINY = "sam2-hiera-tiny"


class Engine(StrEnum):
    """RouteRef.engine: what runs a route. Each is named after the Python package that provides it,
    which is how an infer service finds it installed (GetRuntime's `engines`)."""

    ONNXRUNTIME = "onnxruntime"
    TORCH = "torch"
    OPENVINO = "openvino"


class Output(StrEnum):
    """An output of image.matte (MatteOutputSpec.kind); docs/API.md defines each."""

    MATTE = "matte"
    CUTOUT = "cutout"
    COMPOSITE = "composite"
    MASK = "mask"


def raw_channels(output: str, has_alpha: bool) -> int:
    """The bytes a pixel of an output's raw layout (MATTE_FORMAT_RAW; docs/API.md), the same on both
    sides of the wire: the matte and the mask 1 (grey; the mask 0 or 255), the cutout 4 (RGBA), the
    composite 3 (RGB) or 4 where it keeps transparency (`has_alpha`)."""
    if output in (Output.MATTE, Output.MASK):
        return 1
    return 4 if has_alpha or output == Output.CUTOUT else 3


class CutoutAction(StrEnum):
    """CutoutPrompt.action, in words: what a prompt's region does to a cutout's matte (docs/MATTE.md)."""

    KEEP = "keep"  # the region is subject
    REMOVE = "remove"  # the region is background


class Part(StrEnum):
    """MatteRequest.part: the part of the subject a recipe with parts mattes alone (`PARTS_OF`);
    without one, such a recipe answers every part's matte, stacked top to bottom in this order."""

    UPPER = "upper"  # u2net_cloth_seg: upper-body clothes
    LOWER = "lower"  # lower-body clothes
    FULL = "full"  # full-body clothes (dresses, overalls)


class ImageFormat(StrEnum):
    """How an image.matte output is encoded (MatteOutputSpec.format)."""

    PNG = "png"
    WEBP = "webp"
    JPEG = "jpeg"  # the composite only, over an opaque background
    RAW = "raw"  # the pixels as they are, no header (MATTE_FORMAT_RAW: its byte layout)


class MaskFormat(StrEnum):
    """How an image.segment mask is answered (MaskOutput.formats)."""

    PNG = "png"
    RLE = "rle"  # COCO run-length encoding
    POLYGONS = "polygons"


class RouteState(StrEnum):
    """RouteStatus.state, in words (the order a route goes through, UNAVAILABLE aside)."""

    UNAVAILABLE = "unavailable"  # the recipe's files are not pinned
    MISSING = "missing"  # a pinned file is absent or not verified
    DOWNLOADED = "downloaded"  # files verified; the route still needs its preparation
    PREPARED = "prepared"  # everything on disk; loads on first use
    READY = "ready"  # prepared and loaded warm in the infer service


RECIPES_OF: Mapping[Feature, tuple[Recipe, ...]] = MappingProxyType(
    {
        Feature.MATTE: (
            Recipe.U2NETP,
            Recipe.INSPYRENET_SWINB,
            Recipe.BIREFNET_LITE,
            Recipe.BIREFNET_HR,
            Recipe.BIREFNET_DYNAMIC,
            Recipe.U2NET,
            Recipe.U2NET_HUMAN_SEG,
            Recipe.U2NET_CLOTH_SEG,
            Recipe.SILUETA,
            Recipe.ISNET_GENERAL_USE,
            Recipe.ISNET_ANIME,
            Recipe.BIREFNET_GENERAL,
            Recipe.BIREFNET_PORTRAIT,
            Recipe.BIREFNET_DIS,
            Recipe.BIREFNET_HRSOD,
            Recipe.BIREFNET_COD,
            Recipe.BIREFNET_MASSIVE,
            Recipe.BRIA_RMBG,
        ),
        Feature.SEGMENT: (Recipe.SAM21_HIERA_TINY, Recipe.SAM2_HIERA_TINY),
    }
)
# The recipes whose mattes are of parts, and their parts in the order a stacked answer has them.
PARTS_OF: Mapping[Recipe, tuple[Part, ...]] = MappingProxyType(
    {Recipe.U2NET_CLOTH_SEG: (Part.UPPER, Part.LOWER, Part.FULL)}
)
OUTPUT_KINDS: Mapping[Output, infer_pb2.MatteOutputKind.ValueType] = MappingProxyType(
    {
        Output.MATTE: infer_pb2.MATTE_OUTPUT_KIND_MATTE,
        Output.CUTOUT: infer_pb2.MATTE_OUTPUT_KIND_CUTOUT,
        Output.COMPOSITE: infer_pb2.MATTE_OUTPUT_KIND_COMPOSITE,
        Output.MASK: infer_pb2.MATTE_OUTPUT_KIND_MASK,
    }
)
IMAGE_FORMATS: Mapping[ImageFormat, infer_pb2.MatteFormat.ValueType] = MappingProxyType(
    {
        ImageFormat.PNG: infer_pb2.MATTE_FORMAT_PNG,
        ImageFormat.WEBP: infer_pb2.MATTE_FORMAT_WEBP,
        ImageFormat.JPEG: infer_pb2.MATTE_FORMAT_JPEG,
        ImageFormat.RAW: infer_pb2.MATTE_FORMAT_RAW,
    }
)
MASK_FORMATS: Mapping[MaskFormat, infer_pb2.MaskFormat.ValueType] = MappingProxyType(
    {
        MaskFormat.PNG: infer_pb2.MASK_FORMAT_PNG,
        MaskFormat.RLE: infer_pb2.MASK_FORMAT_RLE,
        MaskFormat.POLYGONS: infer_pb2.MASK_FORMAT_POLYGONS,
    }
)
ROUTE_STATES: Mapping[RouteState, catalogue_pb2.RouteState.ValueType] = MappingProxyType(
    {
        RouteState.UNAVAILABLE: catalogue_pb2.ROUTE_STATE_UNAVAILABLE,
        RouteState.MISSING: catalogue_pb2.ROUTE_STATE_MISSING,
        RouteState.DOWNLOADED: catalogue_pb2.ROUTE_STATE_DOWNLOADED,
        RouteState.PREPARED: catalogue_pb2.ROUTE_STATE_PREPARED,
        RouteState.READY: catalogue_pb2.ROUTE_STATE_READY,
    }
)
# The same tables read from the wire's side (an enum value -> its name; UNSPECIFIED is in none).
CUTOUT_ACTIONS: Mapping[CutoutAction, infer_pb2.CutoutAction.ValueType] = MappingProxyType(
    {CutoutAction.KEEP: infer_pb2.CUTOUT_ACTION_KEEP, CutoutAction.REMOVE: infer_pb2.CUTOUT_ACTION_REMOVE}
)
CUTOUT_ACTION_OF: Mapping[int, CutoutAction] = MappingProxyType({code: name for name, code in CUTOUT_ACTIONS.items()})
OUTPUT_OF: Mapping[int, Output] = MappingProxyType({code: name for name, code in OUTPUT_KINDS.items()})
IMAGE_FORMAT_OF: Mapping[int, ImageFormat] = MappingProxyType({code: name for name, code in IMAGE_FORMATS.items()})
MASK_FORMAT_OF: Mapping[int, MaskFormat] = MappingProxyType({code: name for name, code in MASK_FORMATS.items()})
ROUTE_STATE_OF: Mapping[int, RouteState] = MappingProxyType({code: name for name, code in ROUTE_STATES.items()})


class GatewayReason(StrEnum):
    """The web gateway's own reasons, answered over HTTP only (a request it refuses before any call
    to the services, or could not read); docs/WEB.md lists them with their HTTP statuses."""

    BAD_REQUEST = "BAD_REQUEST"  # a request the gateway could not make into a call (the field named)
    UNKNOWN_PARAMETER = "UNKNOWN_PARAMETER"  # a query parameter, form field or JSON field the endpoint does not take
    NOT_FOUND = "NOT_FOUND"  # no such path
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    UPLOAD_TOO_LARGE = "UPLOAD_TOO_LARGE"
    HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"  # the request's headers or body came too slowly
    HOST_NOT_ALLOWED = "HOST_NOT_ALLOWED"  # a Host header the gateway does not answer for (DNS rebinding)
    TOO_MANY_CONNECTIONS = "TOO_MANY_CONNECTIONS"
    TOO_MANY_UPLOADS = "TOO_MANY_UPLOADS"  # the bodies held at once are at their bound
