"""What an app gets back: typed outputs, and the pure functions that make them from the services'
results (shared by every client, whatever its transport).

Masks come as the formats asked (`MaskOutput.png`, `.rle`, `.polygons`, always `.box` and
`.area`); `MaskOutput.array()` turns the PNG or the RLE into a numpy array (numpy, and Pillow
for PNGs: `pip install craftai[arrays]`), `Rle.to_coco()` gives pycocotools' dict. A removed
background's outputs likewise: `EncodedImage.array()` (numpy; Pillow for an encoded one), and a
raw one's `shape` without numpy.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from craftai_wire import vocabulary
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import IMAGE_FORMAT_OF, MASK_FORMATS, ImageFormat, Output

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# A mask format as an app may write it: the name, or the vocabulary's member (the Literal is for
# type checkers; tests/unit/test_vocabulary.py keeps its names the vocabulary's).
MaskFormat = Literal["png", "rle", "polygons"] | vocabulary.MaskFormat
# A raw output's file holds its pixels alone: ".raw" and no media type but bytes (its size is not in it).
SUFFIXES: dict[ImageFormat, str] = {
    ImageFormat.PNG: ".png",
    ImageFormat.WEBP: ".webp",
    ImageFormat.JPEG: ".jpg",
    ImageFormat.RAW: ".raw",
}
MEDIA_TYPES: dict[ImageFormat, str] = {
    ImageFormat.PNG: "image/png",
    ImageFormat.WEBP: "image/webp",
    ImageFormat.JPEG: "image/jpeg",
    ImageFormat.RAW: "application/octet-stream",
}
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # channels -> Pillow's mode


@dataclass(frozen=True)
class EncodedImage:
    """One output of a removed background at the picture's size: encoded, or its raw pixels
    (format "raw": row by row, `channels` bytes a pixel, no header; docs/API.md).

    `width` is the picture's and `channels` the output's pixel layout (1: the matte, the mask as 0
    or 255; 3: RGB; 4: RGBA, straight alpha), so that raw bytes need no guessing: `shape` and
    `array()`. An output made before these were known (built by hand) has 0 for both."""

    data: bytes
    format: ImageFormat
    has_alpha: bool = False
    width: int = 0
    channels: int = 0

    @property
    def suffix(self) -> str:
        """The file name suffix for this format: ".png", ".webp", ".jpg", ".raw"."""
        return SUFFIXES[self.format]

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]

    @property
    def shape(self) -> tuple[int, ...]:
        """A raw output's array shape: (rows, width) for one channel, else (rows, width, channels).
        The rows are len(data) / (width * channels): the picture's height, or that times the parts
        of a recipe whose parts come stacked. ValueError for an encoded output (`array()` decodes)."""
        if self.format != ImageFormat.RAW:
            raise ValueError(f"this output is a {self.format.upper()} file, not raw pixels: array() decodes it")
        row = self.width * self.channels
        if row <= 0 or len(self.data) % row:
            raise ValueError(
                f"{len(self.data):,} raw bytes are not whole rows of {self.width} pixels of {self.channels} bytes"
            )
        rows = len(self.data) // row
        return (rows, self.width) if self.channels == 1 else (rows, self.width, self.channels)

    def array(self) -> npt.NDArray[np.uint8]:
        """The pixels as a uint8 numpy array of the raw layout, whatever the format: (H, W) for
        the matte and the mask (0 or 255), (H, W, 3) RGB or (H, W, 4) RGBA. Raw: a read-only view
        of `data` (no copy; `.copy()` one to change it); encoded: decoded with Pillow (`pip install
        craftai[arrays]`)."""
        numpy = _numpy()
        if self.format == ImageFormat.RAW:
            return cast("npt.NDArray[np.uint8]", numpy.frombuffer(self.data, dtype=numpy.uint8).reshape(self.shape))
        try:
            from PIL import Image
        except ImportError:  # pragma: no cover
            raise ImportError("encoded outputs as arrays need Pillow: pip install craftai[arrays]") from None
        with Image.open(io.BytesIO(self.data)) as opened:
            mode = _MODES.get(self.channels) or ("RGBA" if self.has_alpha else opened.mode)
            return cast("npt.NDArray[np.uint8]", numpy.asarray(opened.convert(mode)))


@dataclass(frozen=True)
class MatteOutput:
    """A removed background: each output asked (None where not asked), at the picture's size.

    matte: 8-bit grayscale, white = subject; cutout: RGBA (colours estimated unless `naive`);
    composite: the subject over the background (RGB over an opaque one); mask: the selection
    (PNG: 1-bit grayscale; raw: 0 or 255 a byte). Each output's `array()` gives its pixels (raw:
    without decoding). `matte_png` and `cutout_png` are the PNG bytes, or b"" when not asked (or
    asked in another format)."""

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
        return self.matte.data if self.matte is not None and self.matte.format == ImageFormat.PNG else b""

    @property
    def cutout_png(self) -> bytes:
        return self.cutout.data if self.cutout is not None and self.cutout.format == ImageFormat.PNG else b""

    @property
    def images(self) -> dict[Output, EncodedImage]:
        """The outputs answered, by name (Output: "matte", "cutout", "composite", "mask")."""
        found = {name: getattr(self, name) for name in Output}
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


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is there wherever the tests run
        raise ImportError("arrays need numpy: pip install craftai[arrays]") from None
    return numpy


@dataclass(frozen=True)
class Rle:
    """COCO run-length encoding of a mask at the picture's size: `counts` alternate unselected and
    selected runs over the pixels in column-major order (unselected first); `compressed` is the
    same in pycocotools' string form."""

    height: int
    width: int
    counts: tuple[int, ...]
    compressed: bytes

    def to_coco(self) -> dict[str, Any]:
        """{"size": [height, width], "counts": "..."}: what pycocotools.mask.decode takes (and COCO JSON holds)."""
        return {"size": [self.height, self.width], "counts": self.compressed.decode("ascii")}

    def array(self) -> npt.NDArray[np.bool_]:
        """The mask as an (H, W) boolean array."""
        numpy = _numpy()
        values = numpy.zeros(len(self.counts), dtype=bool)
        values[1::2] = True
        flat = numpy.repeat(values, numpy.asarray(self.counts, dtype=numpy.int64))
        if flat.size != self.height * self.width:
            raise ValueError(f"the counts cover {flat.size} pixels, not {self.height}x{self.width}")
        return cast("npt.NDArray[np.bool_]", numpy.ascontiguousarray(flat.reshape(self.width, self.height).T))


@dataclass(frozen=True)
class Polygon:
    """An 8-connected region of a mask: its outer ring and its holes' rings, each a sequence of
    (x, y) vertices in picture pixels, closed implicitly: corners of pixels, along their edges (pixel
    (i, j) is the square from (i, j) to (i + 1, j + 1)), so that COCO's reader (pycocotools'
    `frPyObjects`) gives back exactly the mask (docs/API.md, "Mask formats")."""

    outer: tuple[tuple[float, float], ...]
    holes: tuple[tuple[tuple[float, float], ...], ...] = ()

    def arrays(self) -> tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float32]]]:
        """The outer ring and the holes as (N, 2) float32 arrays."""
        numpy = _numpy()

        def ring(vertices: tuple[tuple[float, float], ...]) -> npt.NDArray[np.float32]:
            return cast("npt.NDArray[np.float32]", numpy.asarray(vertices, dtype=numpy.float32).reshape(-1, 2))

        return ring(self.outer), [ring(h) for h in self.holes]


@dataclass(frozen=True)
class MaskOutput:
    """One mask at the picture's size, in the formats asked: `png` (a 1-bit grayscale PNG; empty
    bytes when not asked), `rle`, `polygons`; always its `box` (x0, y0, x1, y1: the first
    selected pixel to past the last; zeros when empty) and `area` (pixels selected). `empty` is
    True when it selects nothing (an answer, not an error); `selected_fraction` is the share of
    pixels selected; `prompt_index` the prompt of the call it answers. From segment_everything,
    `stability_score` and the grid `point` that made it. `low_res`: its low-res logits, answered
    when the call asked for them (`low_res=True`), to feed back as `mask_input`."""

    png: bytes
    predicted_iou: float
    empty: bool
    selected_fraction: float
    low_res_logits: LowResMask | None = None  # None when not asked
    rle: Rle | None = None
    polygons: tuple[Polygon, ...] = ()  # none when not asked (or when the mask is empty)
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    area: int = 0
    prompt_index: int = 0
    stability_score: float = 0.0
    point: Point | None = None

    @property
    def low_res(self) -> LowResMask:
        """The mask's low-res logits, to feed back as `mask_input` (asked with `low_res=True`)."""
        if self.low_res_logits is None:
            raise ValueError(
                "this answer carries no low-res logits: ask for them with low_res=True (segment, "
                "segment_once) to feed this mask back as mask_input"
            )
        return self.low_res_logits

    def array(self) -> npt.NDArray[np.bool_]:
        """The mask as an (H, W) boolean array, from the RLE or the PNG (whichever was asked)."""
        if self.rle is not None:
            return self.rle.array()
        if self.png:
            numpy = _numpy()
            try:
                from PIL import Image
            except ImportError:  # pragma: no cover
                raise ImportError("PNG masks as arrays need Pillow: pip install craftai[arrays]") from None
            return cast("npt.NDArray[np.bool_]", numpy.asarray(Image.open(io.BytesIO(self.png)).convert("L")) > 0)
        raise ValueError("this mask was answered as polygons only; ask for formats 'rle' or 'png' to get its pixels")


@dataclass(frozen=True)
class Prompt:
    """One object's prompt, for calls with several: clicks (Point or (x, y[, foreground])), a box
    (x0, y0, x1, y1), a previous answer's low-res logits, all three candidates or the best (or the
    one Meta's predictor answers: `single_mask_like_meta`)."""

    points: Sequence[PointLike] = ()
    box: Sequence[float] | None = None
    mask_input: MaskInput = None
    all_masks: bool = False
    single_mask_like_meta: bool = False


@dataclass(frozen=True)
class CutoutPrompt:
    """A cutout session's prompt: "keep" (the region is subject) or "remove" (it is background),
    the region SAM finds from clicks (Point or (x, y[, foreground])) and/or a box (x0, y0, x1, y1)."""

    action: str
    points: Sequence[PointLike] = ()
    box: Sequence[float] | None = None


@dataclass(frozen=True)
class SegmentOutput:
    """The answer to a call: masks per prompt in the call's order, each prompt's best first
    (three per prompt when all were asked, else one); `objects` groups them by prompt."""

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
        """The first prompt's best mask."""
        return self.masks[0]

    @property
    def objects(self) -> list[list[MaskOutput]]:
        """The masks of each prompt, in the call's order (each best first)."""
        grouped: list[list[MaskOutput]] = []
        for mask in self.masks:
            while len(grouped) <= mask.prompt_index:
                grouped.append([])
            grouped[mask.prompt_index].append(mask)
        return grouped


@dataclass(frozen=True)
class EverythingOutput:
    """Segment everything: the masks of a picture, best predicted IoU first, from a grid of
    `points` single clicks of which `candidates` masks passed the filters before de-duplication."""

    masks: list[MaskOutput]
    width: int
    height: int
    recipe: str
    engine: str
    device: str
    session_id: str = ""
    points: int = 0
    candidates: int = 0
    timing_ms: dict[str, float] = field(default_factory=dict)
    server_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    request_id: str = ""


PointLike = Point | tuple[float, float, bool] | tuple[float, float]
MaskInput = LowResMask | bytes | None


def _image(result: infer_pb2.MatteResult, name: Output, legacy: bytes, alpha: bool) -> EncodedImage | None:
    if result.HasField(name):  # type: ignore[arg-type]
        image: infer_pb2.MatteImage = getattr(result, name)
        fmt = IMAGE_FORMAT_OF.get(image.format, ImageFormat.PNG)
        return EncodedImage(
            image.data, fmt, image.has_alpha, result.width, vocabulary.raw_channels(name, image.has_alpha)
        )
    if not legacy:
        return None
    return EncodedImage(
        legacy, ImageFormat.PNG, alpha, result.width, vocabulary.raw_channels(name, alpha)
    )  # a server before


# The order of a matte's stages on the server (a protobuf map keeps none): the picture decoded, the
# model's stage, within it the network and each output made, then the encodings.
# a cutout session's too: "segment" (the open's SAM encoder), "merge" (a refinement's regions merged)
MATTE_STAGES = (
    "load",
    "decode",
    "model",
    "network",
    "segment",
    "merge",
    "mask",
    "cutout",
    "composite",
    "host",
    "encode",
)


def in_order(stages: Mapping[str, float], order: Sequence[str]) -> dict[str, float]:
    """A stage timing as a dict in the server's order (`order` first, any other after, by name)."""
    rank = {name: k for k, name in enumerate(order)}
    return {name: stages[name] for name in sorted(stages, key=lambda name: (rank.get(name, len(rank)), name))}


def matte_output(result: infer_pb2.MatteResult, notices: list[str], request_id: str) -> MatteOutput:
    """A MatteResult as the app sees it (with the notices the stream carried)."""
    return MatteOutput(
        matte=_image(result, Output.MATTE, result.matte_png, False),
        cutout=_image(result, Output.CUTOUT, result.cutout_png, True),
        composite=_image(result, Output.COMPOSITE, b"", False),
        mask=_image(result, Output.MASK, b"", False),
        width=result.width,
        height=result.height,
        recipe=result.route.recipe,
        engine=result.route.engine,
        device=result.device,
        timing_ms=in_order(result.timing.stages_ms, MATTE_STAGES),
        server_ms=result.timing.total_ms,
        notices=notices,
        request_id=request_id,
    )


def _ring(ring: infer_pb2.Ring) -> tuple[tuple[float, float], ...]:
    xy = list(ring.xy)
    return tuple(zip(xy[0::2], xy[1::2], strict=True))


def _low_res(m: infer_pb2.Mask) -> LowResMask | None:
    """The mask's logits, where the call asked for them."""
    return LowResMask(m.low_res.logits, m.low_res.width, m.low_res.height) if m.HasField("low_res") else None


def mask_output(m: infer_pb2.Mask) -> MaskOutput:
    """One answered mask, every format it carries."""
    return MaskOutput(
        png=m.png,
        predicted_iou=m.predicted_iou,
        empty=m.empty,
        selected_fraction=m.selected_fraction,
        low_res_logits=LowResMask(m.low_res.logits, m.low_res.width, m.low_res.height)
        if m.HasField("low_res")
        else None,
        rle=Rle(m.rle.height, m.rle.width, tuple(m.rle.counts), m.rle.compressed) if m.HasField("rle") else None,
        polygons=tuple(Polygon(_ring(p.outer), tuple(_ring(h) for h in p.holes)) for p in m.polygons),
        box=(int(m.box.x0), int(m.box.y0), int(m.box.x1), int(m.box.y1)),
        area=int(m.area),
        prompt_index=m.prompt_index,
        stability_score=m.stability_score,
        point=Point(m.point.x, m.point.y) if m.HasField("point") else None,
    )


def _common(result: infer_pb2.SegmentResult | infer_pb2.SegmentEverythingResult) -> dict[str, Any]:
    """What every segmentation answer says besides its masks."""
    return {
        "masks": [mask_output(m) for m in result.masks],
        "width": result.width,
        "height": result.height,
        "recipe": result.route.recipe,
        "engine": result.route.engine,
        "device": result.device,
        "session_id": result.session_id,
        "timing_ms": dict(result.timing.stages_ms),
        "server_ms": result.timing.total_ms,
    }


def segment_output(
    result: infer_pb2.SegmentResult, notices: list[str], reopened: bool = False, request_id: str = ""
) -> SegmentOutput:
    """A SegmentResult as the app sees it: masks per prompt, best first, each with its low-res logits."""
    return SegmentOutput(**_common(result), notices=notices, reopened=reopened, request_id=request_id)


def everything_output(
    result: infer_pb2.SegmentEverythingResult, notices: list[str], request_id: str = ""
) -> EverythingOutput:
    return EverythingOutput(
        **_common(result),
        points=result.points,
        candidates=result.candidates,
        notices=notices,
        request_id=request_id,
    )


def format_codes(formats: Iterable[str]) -> list[infer_pb2.MaskFormat.ValueType]:
    """Format names ("png", "rle", "polygons") as the wire's MaskFormat values; others refused here."""
    codes = []
    for name in formats:
        try:
            codes.append(MASK_FORMATS[vocabulary.MaskFormat(name)])
        except ValueError:
            known = ", ".join(vocabulary.MaskFormat)
            raise ValueError(f"unknown mask format {name!r}; the formats are {known}") from None
    return codes
