"""Mask answers: the output options of a request checked in plain words, and each mask written in
the formats asked (craftai.v1.Mask: 1-bit PNG, COCO RLE, polygons; always its box and area).

Formats: `MaskOutput.formats` (empty: the RPC's default, PNG for Segment and SegmentOnce, RLE for
SegmentEverything); `polygon_tolerance` (unset: 0, every corner); Meta's clean-up areas. The pixel work
is in craftai_infer.pipelines.mask_formats and mask_cleanup; this module only checks and writes
messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from craftai_common.errors import ServiceError, invalid_argument
from craftai_infer import encodings
from craftai_infer.pipelines import mask_formats
from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup
from craftai_infer.pipelines.mask_generator import Everything
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import Reason

PNG, RLE, POLYGONS = infer_pb2.MASK_FORMAT_PNG, infer_pb2.MASK_FORMAT_RLE, infer_pb2.MASK_FORMAT_POLYGONS
NAMES: dict[int, str] = {PNG: "png", RLE: "rle", POLYGONS: "polygons"}
Bool = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]


def _bad(field: str, message: str) -> ServiceError:
    return invalid_argument(Reason.BAD_OPTIONS, message, field=field)


@dataclass(frozen=True)
class Output:
    """What a request asked of its masks."""

    formats: frozenset[int]
    tolerance: float = mask_formats.DEFAULT_TOLERANCE
    cleanup: Cleanup = NO_CLEANUP
    low_res: bool = False  # each mask's low-res logits answered too

    @property
    def stage(self) -> str:
        """The answer's last stage: "png" when only PNGs are written (as before formats existed)."""
        return "png" if self.formats == {PNG} else "masks"


def check_output(message: infer_pb2.MaskOutput, default: int, *, cleanup_allowed: bool = True) -> Output:
    """The request's `output` field; INVALID_ARGUMENT naming the field otherwise."""
    formats = set()
    for index, value in enumerate(message.formats):
        if value not in NAMES:
            name = "MASK_FORMAT_UNSPECIFIED" if value == 0 else f"format number {int(value)}"
            raise _bad(
                f"output.formats[{index}]",
                f"output.formats[{index}] is {name}; a format is MASK_FORMAT_PNG, MASK_FORMAT_RLE "
                "or MASK_FORMAT_POLYGONS",
            )
        formats.add(int(value))
    tolerance = mask_formats.DEFAULT_TOLERANCE
    if message.HasField("polygon_tolerance"):
        tolerance = float(message.polygon_tolerance)
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise _bad(
                "output.polygon_tolerance",
                f"the polygon tolerance is a distance in pixels, 0 or more; got {message.polygon_tolerance}",
            )
    for name in ("max_hole_area", "max_sprinkle_area"):
        value = getattr(message, name)
        if value < 0:
            raise _bad(f"output.{name}", f"{name} is an area in low-res pixels, 0 (off) or more; got {value}")
        if value and not cleanup_allowed:
            raise _bad(
                f"output.{name}",
                f"{name} does not apply here: the generator cleans its masks with options.min_mask_region_area",
            )
    if message.low_res and not cleanup_allowed:
        raise _bad("output.low_res", "low_res does not apply here: the generator answers no low-res logits")
    cleanup = Cleanup(message.max_hole_area, message.max_sprinkle_area)
    return Output(
        frozenset(formats or {default}), tolerance, cleanup if cleanup.active else NO_CLEANUP, message.low_res
    )


def check_everything(options: infer_pb2.EverythingOptions, max_per_side: int, max_per_batch: int) -> Everything:
    """SegmentEverything's options, Meta's defaults where unset; INVALID_ARGUMENT otherwise."""
    d = Everything()
    o = options
    side = o.points_per_side or d.points_per_side
    batch = o.points_per_batch or d.points_per_batch
    if side < 0 or side > max_per_side:
        raise invalid_argument(
            Reason.TOO_MANY_POINTS if side > 0 else Reason.BAD_OPTIONS,
            f"points_per_side is {o.points_per_side}; it must be 1 to {max_per_side} "
            f"(CRAFTAI_MAX_POINTS_PER_SIDE; the grid is its square in points)",
            field="options.points_per_side",
        )
    if batch < 0 or batch > max_per_batch:
        raise _bad(
            "options.points_per_batch",
            f"points_per_batch is {o.points_per_batch}; it must be 1 to {max_per_batch} (CRAFTAI_MAX_POINTS_PER_BATCH)",
        )

    def fraction(name: str, default: float, *, unit: bool = True) -> float:
        if not o.HasField(name):  # type: ignore[arg-type]
            return default
        value = float(getattr(o, name))
        if not math.isfinite(value) or (unit and not 0.0 <= value <= 1.0) or (not unit and value < 0):
            bounds = "in [0, 1]" if unit else "0 or more"
            raise _bad(f"options.{name}", f"{name} must be a number {bounds}; got {getattr(o, name)}")
        return value

    threshold = d.mask_threshold
    if o.HasField("mask_threshold"):
        threshold = float(o.mask_threshold)
        if not math.isfinite(threshold):
            raise _bad("options.mask_threshold", f"mask_threshold must be a finite number; got {o.mask_threshold}")
    if o.min_mask_region_area < 0:
        raise _bad(
            "options.min_mask_region_area",
            f"min_mask_region_area is an area in low-res pixels, 0 (off) or more; got {o.min_mask_region_area}",
        )
    # false (Meta's single-mask answer per point) is checked against the session's route by the feature
    multimask = o.multimask_output if o.HasField("multimask_output") else d.multimask_output
    return Everything(
        points_per_side=side,
        points_per_batch=batch,
        pred_iou_thresh=fraction("pred_iou_thresh", d.pred_iou_thresh),
        stability_score_thresh=fraction("stability_score_thresh", d.stability_score_thresh),
        stability_score_offset=fraction("stability_score_offset", d.stability_score_offset, unit=False),
        mask_threshold=threshold,
        box_nms_thresh=fraction("box_nms_thresh", d.box_nms_thresh),
        min_mask_region_area=o.min_mask_region_area,
        multimask_output=multimask,
    )


def decode_counts(counts: I64, height: int, width: int) -> Bool:
    """An (H, W) mask from COCO counts (column-major runs, unselected first)."""
    values = np.zeros(len(counts), dtype=np.bool_)
    values[1::2] = True
    return np.repeat(values, np.asarray(counts, np.int64)).reshape(width, height).T


def rle_message(counts: I64, height: int, width: int, into: infer_pb2.MaskRle | None = None) -> infer_pb2.MaskRle:
    """The counts as the wire's MaskRle, written `into` a message in place when given (see `written`)."""
    message = infer_pb2.MaskRle() if into is None else into
    message.height, message.width = height, width
    message.counts.extend(counts.tolist())
    message.compressed = mask_formats.rle_string(counts)
    return message


def polygon_messages(mask: Bool, tolerance: float) -> list[infer_pb2.Polygon]:
    def ring(xy: npt.NDArray[np.float32]) -> infer_pb2.Ring:
        return infer_pb2.Ring(xy=xy.reshape(-1).tolist())

    return [
        infer_pb2.Polygon(outer=ring(p.outer), holes=[ring(h) for h in p.holes])
        for p in mask_formats.polygons(mask, tolerance)
    ]


def written(
    mask: Bool | None,
    output: Output,
    png_level: int,
    *,
    counts: I64 | None = None,
    size: tuple[int, int] | None = None,
    extent: tuple[int, int, int, int] | None = None,
    area: int | None = None,
    into: infer_pb2.Mask | None = None,
) -> infer_pb2.Mask:
    """A mask in the formats asked, with its box and area (the rest of the message is the
    caller's). Give the (H, W) `mask`, or its `counts`, `size` (H, W) and `extent` (its box): the
    pixels are only made from the counts when a format needs them. An `extent` and `area` already
    known (the decoder's route measures them where it made the mask) are not measured again.

    `into`: the answer's own Mask (`result.masks.add()`), written in place. protobuf's upb runtime
    copies a message put into another (CopyFrom, a constructor's argument, `extend`) by serialising
    and parsing it again (features/run.py; docs/PERFORMANCE.md, "Answers written in place, not
    copied")."""
    if mask is None:
        assert counts is not None and size is not None and extent is not None
        height, width = size
    else:
        height, width = mask.shape
        counts = mask_formats.rle_counts(mask) if RLE in output.formats else None
    if mask is None and output.formats & {PNG, POLYGONS}:
        assert counts is not None
        mask = decode_counts(counts, height, width)
    message = infer_pb2.Mask() if into is None else into
    if PNG in output.formats:
        assert mask is not None
        message.png = encodings.encode_mask_png(mask, png_level)
    if RLE in output.formats:
        assert counts is not None
        rle_message(counts, height, width, into=message.rle)
    if POLYGONS in output.formats:
        assert mask is not None
        message.polygons.extend(polygon_messages(mask, output.tolerance))
    if area is not None:
        message.area = area
    elif counts is not None:
        message.area = mask_formats.area(counts)
    else:
        assert mask is not None
        message.area = int(np.count_nonzero(mask))
    if extent is None:
        assert mask is not None
        extent = mask_formats.box(mask)
    box = message.box
    box.x0, box.y0, box.x1, box.y1 = extent
    return message
