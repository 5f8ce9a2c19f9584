"""What an app gets back: typed outputs, and the pure functions that make them from the services'
results (shared by every client, whatever its transport)."""

from __future__ import annotations

from dataclasses import dataclass, field

from craftai_wire.v1 import infer_pb2

FORMAT_NAMES = {
    infer_pb2.MATTE_FORMAT_PNG: "png",
    infer_pb2.MATTE_FORMAT_WEBP: "webp",
    infer_pb2.MATTE_FORMAT_JPEG: "jpeg",
}
SUFFIXES = {"png": ".png", "webp": ".webp", "jpeg": ".jpg"}
MEDIA_TYPES = {"png": "image/png", "webp": "image/webp", "jpeg": "image/jpeg"}


@dataclass(frozen=True)
class EncodedImage:
    """One output of a removed background, encoded at the picture's size."""

    data: bytes
    format: str  # "png", "webp" or "jpeg"
    has_alpha: bool = False

    @property
    def suffix(self) -> str:
        """The file name suffix for this encoding: ".png", ".webp", ".jpg"."""
        return SUFFIXES[self.format]

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]


@dataclass(frozen=True)
class MatteOutput:
    """A removed background: each output asked (None where not asked), at the picture's size.

    matte: 8-bit grayscale, white = subject; cutout: RGBA (colours estimated unless `naive`);
    composite: the subject over the background (RGB over an opaque one); mask: the selection
    (PNG: 1-bit grayscale). `matte_png` and `cutout_png` are the PNG bytes, or b"" when not asked
    (or asked in another format)."""

    width: int
    height: int
    recipe: str
    engine: str
    device: str
    matte: EncodedImage | None = None
    cutout: EncodedImage | None = None
    composite: EncodedImage | None = None
    mask: EncodedImage | None = None
    timing_ms: dict[str, float] = field(default_factory=dict)
    server_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    request_id: str = ""

    @property
    def matte_png(self) -> bytes:
        return self.matte.data if self.matte is not None and self.matte.format == "png" else b""

    @property
    def cutout_png(self) -> bytes:
        return self.cutout.data if self.cutout is not None and self.cutout.format == "png" else b""

    @property
    def images(self) -> dict[str, EncodedImage]:
        """The outputs answered, by name ("matte", "cutout", "composite", "mask")."""
        found = {"matte": self.matte, "cutout": self.cutout, "composite": self.composite, "mask": self.mask}
        return {name: image for name, image in found.items() if image is not None}


@dataclass(frozen=True)
class Point:
    """A click in picture pixels (x to the right, y down, origin at the top-left corner)."""

    x: float
    y: float
    foreground: bool = True


@dataclass(frozen=True)
class LowResMask:
    """Low-res mask logits as answered (float32 little-endian, row-major, 256x256); feed one back
    as `mask_input` to refine the next prompt on the same picture."""

    logits: bytes
    width: int = 256
    height: int = 256


@dataclass(frozen=True)
class MaskOutput:
    """One mask: a 1-bit grayscale PNG at the picture's size. `empty` is True when it selects
    nothing (an answer, not an error); `selected_fraction` is the share of pixels selected."""

    png: bytes
    predicted_iou: float
    empty: bool
    selected_fraction: float
    low_res: LowResMask


@dataclass(frozen=True)
class SegmentOutput:
    """The answer to one prompt: masks best first (three when all were asked, else one)."""

    masks: list[MaskOutput]
    width: int
    height: int
    recipe: str
    engine: str
    device: str
    session_id: str = ""
    timing_ms: dict[str, float] = field(default_factory=dict)
    server_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    reopened: bool = False  # the session had been forgotten and was opened again with the picture
    request_id: str = ""

    @property
    def best(self) -> MaskOutput:
        return self.masks[0]


PointLike = Point | tuple[float, float, bool] | tuple[float, float]
MaskInput = LowResMask | bytes | None


def _image(result: infer_pb2.MatteResult, name: str, legacy: bytes, alpha: bool) -> EncodedImage | None:
    if result.HasField(name):  # type: ignore[arg-type]
        image: infer_pb2.MatteImage = getattr(result, name)
        return EncodedImage(image.data, FORMAT_NAMES.get(image.format, "png"), image.has_alpha)
    return EncodedImage(legacy, "png", alpha) if legacy else None  # a server before issue 17


def matte_output(result: infer_pb2.MatteResult, notices: list[str], request_id: str) -> MatteOutput:
    """A MatteResult as the app sees it (with the notices the stream carried)."""
    return MatteOutput(
        matte=_image(result, "matte", result.matte_png, False),
        cutout=_image(result, "cutout", result.cutout_png, True),
        composite=_image(result, "composite", b"", False),
        mask=_image(result, "mask", b"", False),
        width=result.width,
        height=result.height,
        recipe=result.route.recipe,
        engine=result.route.engine,
        device=result.device,
        timing_ms=dict(result.timing.stages_ms),
        server_ms=result.timing.total_ms,
        notices=notices,
        request_id=request_id,
    )


def segment_output(
    result: infer_pb2.SegmentResult, notices: list[str], reopened: bool = False, request_id: str = ""
) -> SegmentOutput:
    """A SegmentResult as the app sees it: masks best first, each with its low-res logits."""
    return SegmentOutput(
        masks=[
            MaskOutput(
                png=m.png,
                predicted_iou=m.predicted_iou,
                empty=m.empty,
                selected_fraction=m.selected_fraction,
                low_res=LowResMask(m.low_res.logits, m.low_res.width, m.low_res.height),
            )
            for m in result.masks
        ],
        width=result.width,
        height=result.height,
        recipe=result.route.recipe,
        engine=result.route.engine,
        device=result.device,
        session_id=result.session_id,
        timing_ms=dict(result.timing.stages_ms),
        server_ms=result.timing.total_ms,
        notices=notices,
        reopened=reopened,
        request_id=request_id,
    )
