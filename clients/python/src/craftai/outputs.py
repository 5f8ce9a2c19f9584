"""What an app gets back: typed outputs, and the pure functions that make them from the services'
results (shared by every client, whatever its transport)."""

from __future__ import annotations

from dataclasses import dataclass, field

from craftai_wire.v1 import infer_pb2


@dataclass(frozen=True)
class MatteOutput:
    """A removed background: the matte (and cutout) PNGs at the picture's size."""

    matte_png: bytes
    cutout_png: bytes
    width: int
    height: int
    recipe: str
    engine: str
    device: str
    timing_ms: dict[str, float] = field(default_factory=dict)
    server_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    request_id: str = ""


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


def matte_output(result: infer_pb2.MatteResult, notices: list[str], request_id: str) -> MatteOutput:
    """A MatteResult as the app sees it (with the notices the stream carried)."""
    return MatteOutput(
        matte_png=result.matte_png,
        cutout_png=result.cutout_png,
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
