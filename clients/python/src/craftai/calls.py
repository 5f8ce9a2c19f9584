"""What the SDK asks: the RPCs it calls (service, name, deadline, answer type) and pure functions
that build their requests from an app's arguments. No I/O here but reading a picture file
(craftai.pictures), so that the blocking client and an asyncio client build the very same requests."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from google.protobuf.message import Message

from craftai.outputs import LowResMask, MaskInput, Point, PointLike, Prompt, format_codes
from craftai_wire.v1 import catalogue_pb2, common_pb2, infer_pb2, prepare_pb2
from craftai_wire.vocabulary import (
    CUTOUT_ACTIONS,
    IMAGE_FORMATS,
    OUTPUT_KINDS,
    PARTS_OF,
    CutoutAction,
    Feature,
    ImageFormat,
    Output,
    Part,
)

ServiceName = Literal["catalogue", "prepare", "infer"]
RequestT = TypeVar("RequestT", bound=Message)
AnswerT = TypeVar("AnswerT", bound=Message)
MATTE_FEATURE = Feature.MATTE
SEGMENT_FEATURE = Feature.SEGMENT


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
    deadline: Literal["inference", "setup", "frames"]


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
# A stream both ways: its request is a stream of SetupUpload messages (craftai.brought.messages).
SETUP_FROM = Stream("prepare", "SetupFrom", prepare_pb2.SetupUpload, prepare_pb2.SetupResult, "setup")
GET_RUNTIME = Unary("infer", "GetRuntime", infer_pb2.GetRuntimeRequest, infer_pb2.Runtime)
MATTE = Stream("infer", "Matte", infer_pb2.MatteRequest, infer_pb2.MatteResult, "inference")
OPEN_SESSION = Stream("infer", "OpenSession", infer_pb2.OpenSessionRequest, infer_pb2.OpenSessionResult, "inference")
SEGMENT = Stream("infer", "Segment", infer_pb2.SegmentRequest, infer_pb2.SegmentResult, "inference")
SEGMENT_ONCE = Stream("infer", "SegmentOnce", infer_pb2.SegmentOnceRequest, infer_pb2.SegmentResult, "inference")
SEGMENT_EVERYTHING = Stream(
    "infer", "SegmentEverything", infer_pb2.SegmentEverythingRequest, infer_pb2.SegmentEverythingResult, "inference"
)
# A stream both ways: the start, then frames; answered frame by frame (craftai.frames).
MATTE_FRAMES = Stream("infer", "MatteFrames", infer_pb2.MatteFramesRequest, infer_pb2.FrameResult, "frames")
# SegmentEverything's parameters: Meta's SAM2AutomaticMaskGenerator's names (docs/API.md).
EVERYTHING_OPTIONS = frozenset(infer_pb2.EverythingOptions.DESCRIPTOR.fields_by_name)
CLOSE_SESSION = Unary("infer", "CloseSession", infer_pb2.CloseSessionRequest, infer_pb2.CloseSessionResponse)
OPEN_CUTOUT = Stream("infer", "OpenCutout", infer_pb2.OpenCutoutRequest, infer_pb2.CutoutResult, "inference")
REFINE_CUTOUT = Stream("infer", "RefineCutout", infer_pb2.RefineCutoutRequest, infer_pb2.CutoutResult, "inference")


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
        given = built.mask_input  # written in place: put in, a message is copied (matte_request says why)
        given.logits, given.width, given.height = low.logits, low.width, low.height
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


def cutout_prompt(action: str, points: Iterable[PointLike], box: Sequence[float] | None) -> infer_pb2.CutoutPrompt:
    """A cutout's keep or remove prompt (CutoutAction): points (Point or (x, y[, foreground])) and/or
    a box (x0, y0, x1, y1), as a segmentation prompt's; one of the two at least."""
    region = prompt(points, box, None, False)
    if not region.points and not region.HasField("box"):
        raise ValueError("a keep or remove prompt needs points or a box")
    built = infer_pb2.CutoutPrompt(action=CUTOUT_ACTIONS[CutoutAction(action)], points=region.points)
    if region.HasField("box"):
        built.box.CopyFrom(region.box)
    return built


def open_cutout_request(
    matte: infer_pb2.MatteRequest, recipe: str | None = None, engine: str | None = None
) -> infer_pb2.OpenCutoutRequest:
    """A cutout session's opening: the Matte request (picture, recipe, outputs) and the image.segment
    route asked (`recipe`, `engine`; else the catalogue's advice)."""
    request = infer_pb2.OpenCutoutRequest(segment_route=route_ref(SEGMENT_FEATURE, recipe, engine))
    request.matte.CopyFrom(matte)
    return request


def mask_output(
    formats: Iterable[str] | str | None,
    polygon_tolerance: float | None = None,
    max_hole_area: int = 0,
    max_sprinkle_area: int = 0,
    *,
    low_res: bool = False,
) -> infer_pb2.MaskOutput:
    """What the call asks of its masks: formats by name ("png", "rle", "polygons"; None: the RPC's
    default), the polygons' tolerance in pixels, Meta's clean-up areas (low-res pixels), and
    whether each mask's low-res logits come too (to feed one back as `mask_input`)."""
    names = [formats] if isinstance(formats, str) else list(formats or ())
    built = infer_pb2.MaskOutput(
        formats=format_codes(names), max_hole_area=max_hole_area, max_sprinkle_area=max_sprinkle_area, low_res=low_res
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
    to give: docs/API.md, Engine advice)."""
    return catalogue_pb2.ResolveRouteRequest(route=route_ref(feature, recipe, engine))


def setup_request(feature: str, recipe: str | None = None, engine: str | None = None) -> prepare_pb2.SetupRequest:
    """No gpu_available: prepare resolves through the catalogue, which asks the infer service."""
    return prepare_pb2.SetupRequest(route=route_ref(feature, recipe, engine))


Colour = str | Sequence[int]  # "#rrggbb", "#rrggbbaa", "#rgb", "r,g,b[,a]", or (r, g, b[, a]), 0..255
_HEX = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")


def colour(value: Colour) -> tuple[int, int, int, int]:
    """An RGBA colour (0..255 each, alpha 255 unless given) from hex ("#ff8800", "#ff880080", "#f80")
    or numbers ("255,136,0[,128]", (255, 136, 0[, 128])); ValueError in plain words otherwise."""
    if isinstance(value, str):
        text = value.strip()
        found = _HEX.match(text)
        if found:
            digits = found.group(1)
            if len(digits) == 3:
                digits = "".join(d * 2 for d in digits)
            channels = [int(digits[i : i + 2], 16) for i in range(0, len(digits), 2)]
        else:
            try:
                channels = [int(part) for part in text.split(",")]
            except ValueError:
                channels = []
            if not channels:
                raise ValueError(f"{value!r} is not a colour: give hex (#rrggbb or #rrggbbaa) or r,g,b[,a] (0..255)")
    else:
        channels = [int(v) for v in value]
    if len(channels) not in (3, 4) or not all(0 <= c <= 255 for c in channels):
        raise ValueError(f"{value!r} is not a colour: three or four channels (r, g, b[, a]), each 0..255")
    r, g, b, *rest = channels
    return (r, g, b, rest[0] if rest else 255)


@dataclass(frozen=True)
class MatteOptions:
    """What a remove_background call asks for (built and checked by `matte_options`)."""

    outputs: tuple[str, ...] = (Output.CUTOUT,)  # Output's names
    formats: Mapping[str, str] = field(default_factory=dict)  # output -> ImageFormat's name; png where not named
    naive: bool = False  # cutout and composite: the picture's own colours, no foreground estimation
    bg_color: tuple[int, int, int, int] | None = None
    bg_blur: float | None = None
    bg_image: bytes | None = None
    threshold: float | None = None
    png_level: int | None = None
    jpeg_quality: int | None = None
    part: str | None = None  # Part's name: a recipe with parts (PARTS_OF) mattes that part alone


def _either(names: Iterable[str]) -> str:
    """ "a, b or c": the names a value may take, for a message."""
    *first, last = names
    return f"{', '.join(first)} or {last}" if first else last


def _output(name: str) -> Output:
    try:
        return Output(name)
    except ValueError:
        raise ValueError(f"{name!r} is not an output: the outputs are {', '.join(Output)}") from None


def _names(outputs: str | Iterable[str]) -> list[Output]:
    listed = [o.strip().lower() for o in (outputs.split(",") if isinstance(outputs, str) else outputs)]
    names = [_output(name) for name in listed if name]
    if not names:
        raise ValueError(f"ask for at least one output: {', '.join(Output)}")
    if len(set(names)) != len(names):
        raise ValueError(f"each output once: {', '.join(names)}")
    return names


def _formats(names: Sequence[Output], format: str | Mapping[str, str] | None) -> dict[str, str]:
    """One format for every output ("jpeg" for the composite only, the rest PNG), or one per output."""
    if format is None:
        return {}
    if isinstance(format, str):
        try:
            chosen = ImageFormat(format.strip().lower().replace("jpg", "jpeg"))
        except ValueError:
            raise ValueError(f"{format!r} is not a format: {_either(ImageFormat)}") from None
        if chosen == ImageFormat.JPEG:
            if Output.COMPOSITE not in names:
                raise ValueError("JPEG is for the composite (over an opaque background): ask for it, or png or webp")
            return {Output.COMPOSITE: ImageFormat.JPEG}
        return {name: chosen for name in names}
    made: dict[str, str] = {}
    for name, fmt in format.items():
        (key,) = _names([name])
        (made[key],) = _formats([key], fmt).values()
    return made


def default_outputs(*, cutout: bool = False, background: bool = False, threshold: bool = False) -> list[Output]:
    """The outputs of a remove_background call that names none: the SDK's, the `craftai` command's
    and the HTTP API's alike (docs/API.md, "The default outputs"), so that one picture and one set of
    options give the same files everywhere. The outputs the options describe (a background: the
    composite; a threshold: the mask), else the cutout, what "remove the background" means to a
    person; `cutout` adds the cutout to the others."""
    names = [Output.COMPOSITE] if background else []
    names += [Output.MASK] if threshold else []
    if cutout or not names:
        names.insert(0, Output.CUTOUT)
    return names


def matte_options(
    *,
    outputs: str | Iterable[str] | None = None,
    cutout: bool = False,
    naive: bool = False,
    bg_color: Colour | None = None,
    bg_blur: float | None = None,
    bg_image: bytes | None = None,
    threshold: float | None = None,
    format: str | Mapping[str, str] | None = None,
    png_level: int | None = None,
    jpeg_quality: int | None = None,
    part: str | None = None,
) -> MatteOptions:
    """The options of a remove_background call, checked (ValueError in plain words).

    Without `outputs`: `default_outputs` (the cutout; the composite instead when a background is
    given, the mask when a threshold is; `cutout=True` keeps the cutout beside them). With `outputs`
    ("matte,cutout" or a list), exactly those (`cutout=True` adds the cutout); a background without
    the composite, or a threshold without the mask, is refused as a likely mistake.
    """
    backgrounds = [b for b in (bg_color, bg_blur, bg_image) if b is not None]
    if len(backgrounds) > 1:
        raise ValueError("give one background: a colour, a blur radius or a picture")
    if outputs is None:
        names = default_outputs(cutout=cutout, background=bool(backgrounds), threshold=threshold is not None)
    else:
        names = _names(outputs)
        if cutout and Output.CUTOUT not in names:
            names.append(Output.CUTOUT)
        if backgrounds and Output.COMPOSITE not in names:
            raise ValueError("a background is for the composite: add composite to the outputs")
        if threshold is not None and Output.MASK not in names:
            raise ValueError("a threshold is for the mask: add mask to the outputs")
    if threshold is not None and not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise ValueError(f"the threshold is {threshold}; it is a share of full alpha, in [0, 1]")
    if bg_blur is not None and not (math.isfinite(bg_blur) and bg_blur > 0):
        raise ValueError(f"the blur radius is {bg_blur}; it is a number of pixels, more than 0")
    if png_level is not None and not 0 <= png_level <= 9:
        raise ValueError(f"the PNG compression level is {png_level}; it is 0 (none) to 9 (smallest)")
    if jpeg_quality is not None and not 1 <= jpeg_quality <= 100:
        raise ValueError(f"the JPEG quality is {jpeg_quality}; it is 1 to 100")
    if part is not None:
        try:
            part = Part(part.strip().lower())
        except ValueError:
            raise ValueError(
                f"{part!r} is not a part: {_either(Part)} (of a recipe with parts: {_either(PARTS_OF)})"
            ) from None
    return MatteOptions(
        outputs=tuple(names),
        formats=_formats(names, format),
        naive=naive,
        bg_color=colour(bg_color) if bg_color is not None else None,
        bg_blur=bg_blur,
        bg_image=bg_image,
        threshold=threshold,
        png_level=png_level,
        jpeg_quality=jpeg_quality,
        part=part,
    )


def matte_request(
    picture: bytes, options: MatteOptions | bool = False, recipe: str | None = None, engine: str | None = None
) -> infer_pb2.MatteRequest:
    """The Matte request for a picture; `options` True/False is the matte with/without the cutout."""
    if isinstance(options, bool):
        options = matte_options(outputs=[Output.MATTE], cutout=options)
    request = infer_pb2.MatteRequest(
        route=route_ref(MATTE_FEATURE, recipe, engine),
        outputs=[
            infer_pb2.MatteOutputSpec(
                kind=OUTPUT_KINDS[Output(name)],
                format=IMAGE_FORMATS[ImageFormat(options.formats.get(name, ImageFormat.PNG))],
            )
            for name in options.outputs
        ],
        naive=options.naive,
    )
    # The picture's bytes set in place: a Picture message put in would be copied (protobuf's upb
    # runtime serialises and parses it again: up to ~4 ms for a 2.4 MB picture sent as its pixels).
    request.picture.data = picture
    if options.bg_color is not None:
        r, g, b, a = options.bg_color
        request.background.color.CopyFrom(infer_pb2.MatteColor(r=r, g=g, b=b, a=a))
    elif options.bg_blur is not None:
        request.background.blur_radius = options.bg_blur
    elif options.bg_image is not None:
        request.background.picture.data = options.bg_image
    if options.threshold is not None:
        request.mask_threshold = options.threshold
    if options.png_level is not None:
        request.png_compress_level = options.png_level
    if options.jpeg_quality is not None:
        request.jpeg_quality = options.jpeg_quality
    if options.part is not None:
        request.part = options.part
    return request


def open_session_request(picture: bytes, recipe: str = "", engine: str = "") -> infer_pb2.OpenSessionRequest:
    request = infer_pb2.OpenSessionRequest(route=route_ref(SEGMENT_FEATURE, recipe, engine))
    request.picture.data = picture  # in place (matte_request says why)
    return request


def segment_once_request(
    picture: bytes,
    asked: infer_pb2.Prompt | tuple[infer_pb2.Prompt | None, list[infer_pb2.Prompt]],
    recipe: str | None = None,
    engine: str | None = None,
    output: infer_pb2.MaskOutput | None = None,
) -> infer_pb2.SegmentOnceRequest:
    single, several = (asked, []) if isinstance(asked, infer_pb2.Prompt) else asked
    request = infer_pb2.SegmentOnceRequest(
        route=route_ref(SEGMENT_FEATURE, recipe, engine), prompts=several, output=output
    )
    request.picture.data = picture  # in place (matte_request says why)
    if single is not None:
        request.prompt.CopyFrom(single)
    return request
