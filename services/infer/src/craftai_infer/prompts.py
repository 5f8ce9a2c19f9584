"""Segmentation prompts as sent by apps (craftai.v1.Prompt), checked in plain words.

Two steps, so that a request that can never be answered is refused before any model work:
`check(prompt, max_points)` needs nothing but the message (labels, finite numbers, box corners,
the point limit, the mask size, something to segment); `Checked.within(width, height)` checks
that every point and box corner lies on the picture and gives the pipeline's `SamPrompt`.
`check_call` does the first step for a call's one prompt (`prompt`) or several (`prompts`), each
refusal naming its field (`prompt.box`, `prompts[2].points[0]`).

Coordinates are picture pixels: x to the right, y down, origin at the top-left corner of the
top-left pixel; the picture spans [0, width] x [0, height], edges included, so the box
(0, 0, width, height) is the whole picture and the centre of pixel (i, j) is (i + 0.5, j + 0.5).
A box is (x0, y0) top-left and (x1, y1) bottom-right with x0 < x1 and y0 < y1; a box drawn
backwards (inverted corners) is refused rather than silently reordered, so that an app that
mixes up its corners finds out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from craftai_common.errors import ServiceError, invalid_argument
from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_models.sam2.contract import BACKGROUND, FOREGROUND, LOW_RES
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import Reason

LABELS = {infer_pb2.POINT_LABEL_FOREGROUND: FOREGROUND, infer_pb2.POINT_LABEL_BACKGROUND: BACKGROUND}
LOW_RES_BYTES = LOW_RES * LOW_RES * 4


def _bad(field: str, message: str) -> ServiceError:
    return invalid_argument(Reason.BAD_PROMPT, message, field=field)


def _number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Checked:
    """A prompt whose content is valid; `within` checks it against the picture's size."""

    points: npt.NDArray[np.float32]  # [N, 2] x, y
    labels: npt.NDArray[np.int64]  # [N] 1 foreground, 0 background
    box: tuple[float, float, float, float] | None
    mask_input: npt.NDArray[np.float32] | None  # [256, 256]
    all_masks: bool
    where: str = "prompt"  # the prompt's field in the request, for refusals
    single_mask_like_meta: bool = False

    def within(self, width: int, height: int) -> SamPrompt:
        """The pipeline's prompt; INVALID_ARGUMENT naming the first point or box outside the picture."""
        for index, (x, y) in enumerate(self.points.tolist()):
            if not (0.0 <= x <= width and 0.0 <= y <= height):
                raise _bad(
                    f"{self.where}.points[{index}]",
                    f"point {index} ({_number(x)}, {_number(y)}) is outside the {width}x{height} picture; "
                    f"x must be in [0, {width}] and y in [0, {height}] (pixels, origin at the top-left corner)",
                )
        if self.box is not None:
            x0, y0, x1, y1 = self.box
            if min(x0, y0) < 0.0 or x1 > width or y1 > height:
                raise _bad(
                    f"{self.where}.box",
                    f"the box ({_number(x0)}, {_number(y0)}, {_number(x1)}, {_number(y1)}) goes outside the "
                    f"{width}x{height} picture; corners must be in [0, {width}] x [0, {height}]",
                )
        return SamPrompt(
            points=self.points,
            labels=self.labels,
            box=self.box,
            mask_input=self.mask_input,
            single_mask_like_meta=self.single_mask_like_meta,
        )


def check(prompt: infer_pb2.Prompt, max_points: int, where: str = "prompt") -> Checked:
    """Everything about a prompt that does not depend on the picture; INVALID_ARGUMENT otherwise.
    `where` is the prompt's field in the request (`prompt`, or `prompts[i]`)."""
    count = len(prompt.points)
    if count > max_points:
        raise invalid_argument(
            Reason.TOO_MANY_POINTS,
            f"the prompt has {count} points; at most {max_points} are accepted (CRAFTAI_MAX_POINTS)",
            field=f"{where}.points",
        )
    points = np.zeros((count, 2), dtype=np.float32)
    labels = np.zeros(count, dtype=np.int64)
    for index, point in enumerate(prompt.points):
        if not (math.isfinite(point.x) and math.isfinite(point.y)):
            raise _bad(
                f"{where}.points[{index}]",
                f"point {index} has a coordinate that is not a finite number ({point.x}, {point.y})",
            )
        label = LABELS.get(point.label)
        if label is None:
            name = "POINT_LABEL_UNSPECIFIED" if point.label == 0 else f"label number {int(point.label)}"
            raise _bad(
                f"{where}.points[{index}].label",
                f"point {index} has {name}; a point is POINT_LABEL_FOREGROUND or POINT_LABEL_BACKGROUND",
            )
        points[index] = (point.x, point.y)
        labels[index] = label
    box = _box(prompt, where) if prompt.HasField("box") else None
    mask = _mask(prompt.mask_input, where) if prompt.HasField("mask_input") else None
    if count == 0 and box is None:
        extra = (
            " (a mask_input alone is not a prompt: send it with the click or box it refines)"
            if mask is not None
            else ""
        )
        raise _bad(where, f"the prompt has nothing to segment: give at least one point or a box{extra}")
    if prompt.single_mask_like_meta and prompt.all_masks:
        raise _bad(
            f"{where}.single_mask_like_meta",
            "the prompt asks for one mask as Meta's predictor picks it and for all three masks; ask for one of the two",
        )
    return Checked(points, labels, box, mask, prompt.all_masks, where, prompt.single_mask_like_meta)


def check_call(
    prompt: infer_pb2.Prompt | None, several: Sequence[infer_pb2.Prompt], max_points: int, max_prompts: int
) -> list[Checked]:
    """A call's prompts: its one `prompt`, or its `prompts` (at most `max_prompts`), not both."""
    if prompt is not None and several:
        raise _bad("prompts", "the request has both prompt and prompts; give one prompt, or several in prompts")
    if len(several) > max_prompts:
        raise invalid_argument(
            Reason.TOO_MANY_PROMPTS,
            f"the request has {len(several)} prompts; at most {max_prompts} are accepted in one call "
            "(CRAFTAI_MAX_PROMPTS): send the rest in another call",
            field="prompts",
        )
    if several:
        return [check(p, max_points, f"prompts[{i}]") for i, p in enumerate(several)]
    return [check(prompt or infer_pb2.Prompt(), max_points)]


def _box(prompt: infer_pb2.Prompt, where: str = "prompt") -> tuple[float, float, float, float]:
    b = prompt.box
    corners = (b.x0, b.y0, b.x1, b.y1)
    shown = ", ".join(_number(v) for v in corners)
    field = f"{where}.box"
    if not all(math.isfinite(v) for v in corners):
        raise _bad(field, f"the box ({shown}) has a coordinate that is not a finite number")
    if b.x1 < b.x0 or b.y1 < b.y0:
        raise _bad(
            field,
            f"the box ({shown}) has inverted corners; give (x0, y0) top-left and (x1, y1) bottom-right "
            "with x0 < x1 and y0 < y1",
        )
    if b.x1 == b.x0 or b.y1 == b.y0:
        raise _bad(field, f"the box ({shown}) has no area; x1 must be more than x0 and y1 more than y0")
    return (float(b.x0), float(b.y0), float(b.x1), float(b.y1))


def _mask(mask: infer_pb2.LowResMask, where: str = "prompt") -> npt.NDArray[np.float32]:
    if (mask.width, mask.height) != (LOW_RES, LOW_RES) or len(mask.logits) != LOW_RES_BYTES:
        raise _bad(
            f"{where}.mask_input",
            f"mask_input must be a previous answer's low-res logits: {LOW_RES}x{LOW_RES} float32 "
            f"({LOW_RES_BYTES:,} bytes); got {mask.width}x{mask.height} with {len(mask.logits):,} bytes",
        )
    values = np.frombuffer(mask.logits, dtype="<f4").reshape(LOW_RES, LOW_RES).astype(np.float32)
    if not np.isfinite(values).all():
        raise _bad(f"{where}.mask_input", "mask_input holds numbers that are not finite (NaN or infinity)")
    return values


def like_meta_refused(
    engine: str, where: str = "prompt", field: str = "single_mask_like_meta", reason: Reason = Reason.BAD_PROMPT
) -> ServiceError:
    """Meta's single-mask answer (a prompt's single_mask_like_meta, segment everything's
    multimask_output=false) on a route that cannot answer it (an onnxruntime route whose decoder
    graph answers only the three multimask outputs: its preparation could not add token 0):
    refused before any model work, saying which route can."""
    return invalid_argument(
        reason,
        f"Meta's single-mask answer needs the single-mask output (token 0), which the {engine} route cannot "
        "give here: its decoder graph answers the three multimask masks only (its preparation could not add "
        "token 0; craftai status says why); open the session on engine torch (set up with: craftai setup "
        f"image.segment --engine torch), or leave {field} unset for the three masks (the best of them, for a "
        "prompt)",
        field=f"{where}.{field}",
    )


def low_res_message(logits: npt.NDArray[np.float32], into: infer_pb2.LowResMask | None = None) -> infer_pb2.LowResMask:
    """Low-res logits [256, 256] as the wire's float32 little-endian row-major bytes, written `into`
    the answer's own message in place when given (masks.written says why)."""
    height, width = logits.shape
    message = infer_pb2.LowResMask() if into is None else into
    message.logits = np.ascontiguousarray(logits, dtype="<f4").tobytes()
    message.width, message.height = int(width), int(height)
    return message
