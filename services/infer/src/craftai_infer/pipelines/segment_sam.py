"""image.segment with SAM 2.1 (samexporter contract): pre- and post-processing as pure numpy functions.

The semantics are those of Meta's `SAM2ImagePredictor` (docs/research/sam21.md), so that the
onnxruntime route answers what the reference answers:

* picture -> encoder input: uint8 RGB to [0, 1], square resize to 1024x1024 without keeping the
  aspect ratio (bilinear, antialiased when shrinking, as torchvision's `Resize` on a tensor), then
  ImageNet mean/std, float32 NCHW;
* prompt -> decoder inputs: points in picture pixels with labels 1 (foreground) / 0 (background), a
  box as two corner points labelled 2 and 3 placed before the points, every coordinate scaled per
  axis (x * 1024 / W, y * 1024 / H); the decoder graph appends the padding point (label -1) itself;
  an optional previous low-res answer (1x1x256x256 logits) with has_mask_input = 1;
* decoder outputs -> answer: the three low-res logit maps, best first by predicted IoU (only the
  best unless all are asked), upscaled bilinearly (align_corners=False) straight to the picture size
  and thresholded at 0; a mask with no pixel set is flagged empty (an answer, not an error); or,
  for Meta's single mask (`single_mask_like_meta`), the single-mask token 0 where it is stable, else
  the best of the three (`single_mask_by_stability`: the decoder graph the onnxruntime route
  prepares answers token 0 too);
  optionally, before the upscale, Meta's clean-up of small holes and islands on the low-res logits
  (craftai_infer.pipelines.mask_cleanup; the low-res logits answered stay the decoder's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from craftai_infer.pipelines import mask_formats
from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup, clean_logits
from craftai_models import imagenet
from craftai_models.sam2.contract import (
    BACKGROUND,
    BOX_BOTTOM_RIGHT,
    BOX_TOP_LEFT,
    FOREGROUND,
    IMAGE_SIZE,
    LOW_RES,
    STABILITY_DELTA,
    STABILITY_THRESHOLD,
)

MEAN = np.array(imagenet.MEAN, dtype=np.float32)
STD = np.array(imagenet.STD, dtype=np.float32)
MASK_THRESHOLD = 0.0

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
Bool = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]


# ------------------------------------------------------------------------------------------------
# resampling


def _bilinear_taps(in_size: int, out_size: int) -> tuple[I64, I64, F32, F32]:
    """The two source indices and weights of plain bilinear resampling with align_corners=False.

    As torch's CPU `upsample_bilinear2d`: source = max(scale * (i + 0.5) - 0.5, 0) with a float32 scale,
    the multiply-add rounded once to float32 (the fused multiply-add of its compiled kernel; rounding
    twice instead shifts the weights by up to 1e-5, visible as 1e-4 on logits of 30).
    """
    scale = np.float64(np.float32(in_size) / np.float32(out_size))
    exact = scale * (np.arange(out_size, dtype=np.float64) + 0.5) - 0.5
    source = np.maximum(exact.astype(np.float32), np.float32(0.0))
    low = source.astype(np.int64)
    high = np.minimum(low + 1, in_size - 1)
    far = (source - low.astype(np.float32)).astype(np.float32)
    near = (np.float32(1.0) - far).astype(np.float32)
    return low, high, near, far


def resize_antialiased(picture: U8, size: int = IMAGE_SIZE) -> F32:
    """uint8 HxWxC to float32 size x size x C in [0, 1]: torchvision's Resize((size, size)) on a tensor.

    That is bilinear with antialias=True: a triangle filter centred on (i + 0.5) * scale, widened to
    `scale` input pixels when shrinking, weights renormalised at the borders. torch's kernel is a
    port of Pillow's resampling, so Pillow's float ("F") resize per channel gives the same numbers
    (measured: within 4e-7, on photos and on noise shrunk from 4000x3000), in C, faster than numpy.
    The division by 255 comes first, as in ToTensor.
    """
    channels = []
    for channel in range(picture.shape[2]):
        plane = Image.fromarray(picture[..., channel].astype(np.float32) / np.float32(255))
        channels.append(np.asarray(plane.resize((size, size), Image.Resampling.BILINEAR), dtype=np.float32))
    return np.stack(channels, axis=-1)


def upscale_logits(low_res: F32, height: int, width: int) -> F32:
    """[..., h, w] logits to [..., height, width], bilinear with align_corners=False and no antialias.

    Straight to the picture size, as SAM2Transforms.postprocess_masks does (F.interpolate).
    """
    low, high, near, far = _bilinear_taps(low_res.shape[-1], width)
    cols = near * low_res[..., low] + far * low_res[..., high]
    low, high, near, far = _bilinear_taps(low_res.shape[-2], height)
    out: F32 = (near[:, None] * cols[..., low, :] + far[:, None] * cols[..., high, :]).astype(np.float32, copy=False)
    return out


# ------------------------------------------------------------------------------------------------
# pre-processing


def check_picture(picture: npt.NDArray[Any]) -> U8:
    """The picture as HxWx3 uint8, or ValueError in words a caller can act on."""
    if picture.dtype != np.uint8 or picture.ndim != 3 or picture.shape[2] != 3:
        raise ValueError(
            f"the picture must be RGB, 8 bits per channel (HxWx3 uint8); got {picture.dtype} {picture.shape}"
        )
    if picture.shape[0] < 1 or picture.shape[1] < 1:
        raise ValueError(f"the picture is empty ({picture.shape[1]}x{picture.shape[0]})")
    return picture


def preprocess(picture: npt.NDArray[Any]) -> F32:
    """RGB uint8 HxWx3 -> the encoder's `image` input, float32 [1, 3, 1024, 1024]."""
    resized = resize_antialiased(check_picture(picture))
    normalised = (resized - MEAN) / STD
    return np.ascontiguousarray(normalised.transpose(2, 0, 1)[None], dtype=np.float32)


@dataclass(frozen=True, eq=False)
class SamPrompt:
    """One prompt set on one picture, in picture pixels.

    points: N (x, y) pairs with `labels` 1 (foreground) or 0 (background); box: (x0, y0, x1, y1);
    mask_input: a previous answer's low-res logits (256x256, any of 256x256 / 1x256x256 /
    1x1x256x256) to refine. At least one point or the box is needed: the samexporter decoder always
    appends a padding point, which Meta's predictor does not do for a mask-only prompt, so a
    mask-only prompt would not mean the same thing on both. single_mask_like_meta: answer the one
    mask Meta's predictor answers with multimask_output=False (a route that has the single-mask
    token only: the torch route, and the onnxruntime route on its prepared decoder; the feature
    refuses it elsewhere).
    """

    points: Sequence[Sequence[float]] | npt.NDArray[Any] = ()
    labels: Sequence[int] | npt.NDArray[Any] = ()
    box: Sequence[float] | npt.NDArray[Any] | None = None
    mask_input: npt.NDArray[Any] | None = None
    single_mask_like_meta: bool = False


def prompt_points(prompt: SamPrompt) -> int:
    """How many points the decoder gets for a prompt (a box is two): prompts with as many can share a
    decoder call (batched) and a captured graph."""
    return len(prompt.points) + (2 if prompt.box is not None else 0)


def encode_prompt(prompt: SamPrompt, picture_height: int, picture_width: int) -> dict[str, F32]:
    """The prompt as the decoder's point_coords/point_labels/mask_input/has_mask_input feeds."""
    points = (
        np.asarray(prompt.points, dtype=np.float32).reshape(-1, 2)
        if len(prompt.points)
        else np.zeros((0, 2), dtype=np.float32)
    )
    labels = np.asarray(prompt.labels, dtype=np.float32).reshape(-1)
    if len(points) != len(labels):
        raise ValueError(f"{len(points)} points but {len(labels)} labels; give one label per point")
    if not np.isin(labels, (FOREGROUND, BACKGROUND)).all():
        raise ValueError("point labels must be 1 (foreground) or 0 (background)")
    coords = [points]
    kinds = [labels]
    if prompt.box is not None:
        box = np.asarray(prompt.box, dtype=np.float32).reshape(-1)
        if box.shape != (4,):
            raise ValueError(f"a box is four numbers (x0, y0, x1, y1); got {box.size}")
        corners = np.array(
            [[min(box[0], box[2]), min(box[1], box[3])], [max(box[0], box[2]), max(box[1], box[3])]], dtype=np.float32
        )
        coords.insert(0, corners)  # the box goes before the points, as in SAM2ImagePredictor._predict
        kinds.insert(0, np.array([BOX_TOP_LEFT, BOX_BOTTOM_RIGHT], dtype=np.float32))
    all_coords = np.concatenate(coords, axis=0)
    if len(all_coords) == 0:
        raise ValueError("a prompt needs at least one point or a box")
    if not np.isfinite(all_coords).all():
        raise ValueError("point and box coordinates must be finite numbers")
    # Per axis, as SAM2Transforms.transform_coords(normalize=True): x / W * 1024, y / H * 1024.
    size = np.array([picture_width, picture_height], dtype=np.float32)
    scaled = (all_coords / size * np.float32(IMAGE_SIZE)).astype(np.float32)
    mask, has_mask = _mask_feed(prompt.mask_input)
    return {
        "point_coords": scaled[None],
        "point_labels": np.concatenate(kinds)[None].astype(np.float32),
        "mask_input": mask,
        "has_mask_input": has_mask,
    }


def grid_point_feeds(points: F32, picture_height: int, picture_width: int) -> tuple[F32, F32]:
    """N single foreground clicks (the automatic mask generator's grid) as the decoder's
    point_coords [N, 1, 2] and point_labels [N, 1]: what `encode_prompt` gives each click, made
    at once (64 prompts built one by one cost each batch host time the device waited for:
    docs/PERFORMANCE.md, "First run" of segment everything; the mask feeds, zeros with
    has_mask_input 0, are the caller's to make where they are used)."""
    size = np.array([picture_width, picture_height], dtype=np.float32)
    coords = np.asarray(points, dtype=np.float32).reshape(-1, 1, 2)
    scaled = (coords / size * np.float32(IMAGE_SIZE)).astype(np.float32)
    return scaled, np.full((len(scaled), 1), FOREGROUND, dtype=np.float32)


def _mask_feed(mask_input: npt.NDArray[Any] | None) -> tuple[F32, F32]:
    if mask_input is None:
        return np.zeros((1, 1, LOW_RES, LOW_RES), dtype=np.float32), np.zeros(1, dtype=np.float32)
    mask = np.asarray(mask_input, dtype=np.float32)
    if mask.size != LOW_RES * LOW_RES or mask.shape[-2:] != (LOW_RES, LOW_RES):
        raise ValueError(
            f"mask_input must be the {LOW_RES}x{LOW_RES} low-res logits of a previous answer; got shape {mask.shape}"
        )
    if not np.isfinite(mask).all():
        raise ValueError("mask_input must hold finite numbers")
    return mask.reshape(1, 1, LOW_RES, LOW_RES), np.ones(1, dtype=np.float32)


# ------------------------------------------------------------------------------------------------
# post-processing


@dataclass(frozen=True, eq=False)
class SamMasks:
    """The answer to one prompt: K masks (K = 1, or 3 when all are asked), best first.

    masks: bool [K, H, W] at the picture's size; ious: the decoder's predicted IoU [K];
    low_res: clamped low-res logits [K, 256, 256] (feed one back as the next mask_input);
    indices: which of the decoder's three outputs each is; areas: selected pixels [K]; boxes: their
    extents [K, 4] (x0, y0, x1, y1, x1 and y1 past the last pixel; zeros when empty), computed
    where the masks were made (on the device for the torch route) so that writing a mask does not
    scan its pixels again.
    """

    masks: Bool
    ious: F32
    low_res: F32
    indices: I64
    areas: I64
    boxes: I64

    @property
    def fractions(self) -> npt.NDArray[np.float64]:
        """Share of the picture each mask selects (0.0 exactly when it is empty)."""
        height, width = self.masks.shape[-2:]
        shares: npt.NDArray[np.float64] = np.asarray(self.areas, dtype=np.float64) / (height * width)
        return shares

    @property
    def empty(self) -> Bool:
        """True where a mask selects no pixel: answered as *empty*, not as an error."""
        return np.asarray(self.fractions == 0.0)


def single_mask_by_stability(single: F32, single_iou: F32, multi: F32, multi_ious: F32) -> tuple[F32, F32]:
    """Meta's one answer (`_dynamic_multimask_via_stability`, as craftai_models.sam2.mask_decoder
    runs it in torch) for one prompt: token 0's logits [1, 256, 256] and IoU [1] when its mask is
    stable (area above +delta at least the threshold times the area above -delta, in float32 as
    Meta's tensors; stable when nothing is above -delta), else the first of the three multimask
    outputs [3, 256, 256] with the highest predicted IoU [3]. Any mask side: the rule counts pixels."""
    token0 = np.asarray(single, dtype=np.float32)
    side = token0.shape[-2:]
    logits = token0.reshape(-1)
    inner = np.count_nonzero(logits > np.float32(STABILITY_DELTA))
    outer = np.count_nonzero(logits > np.float32(-STABILITY_DELTA))
    stability = np.float32(inner) / np.float32(outer) if outer > 0 else np.float32(1.0)
    if stability >= np.float32(STABILITY_THRESHOLD):
        return token0.reshape(1, *side), np.asarray(single_iou, np.float32).reshape(1)
    scores = np.asarray(multi_ious, np.float32).reshape(-1)
    best = int(np.argmax(scores))  # the first of equal maxima, as torch's argmax
    return np.asarray(multi, np.float32).reshape(-1, *side)[best : best + 1], scores[best : best + 1]


def order_by_score(ious: F32, *, all_masks: bool = False) -> I64:
    """Indices of the masks to answer, best predicted IoU first (a stable sort: ties keep model order)."""
    order = np.argsort(-np.asarray(ious, dtype=np.float64), kind="stable").astype(np.int64)
    return order if all_masks else order[:1]


def postprocess(
    low_res: F32,
    ious: F32,
    picture_height: int,
    picture_width: int,
    *,
    all_masks: bool = False,
    cleanup: Cleanup = NO_CLEANUP,
) -> SamMasks:
    """Decoder outputs (masks [1,3,256,256] or [3,256,256], iou_predictions [1,3] or [3]) -> the answer."""
    logits = np.asarray(low_res, dtype=np.float32).reshape(-1, LOW_RES, LOW_RES)
    scores = np.asarray(ious, dtype=np.float32).reshape(-1)
    if len(scores) != len(logits):
        raise ValueError(f"{len(logits)} masks but {len(scores)} IoU predictions")
    chosen = order_by_score(scores, all_masks=all_masks)
    picked = np.ascontiguousarray(logits[chosen])
    cleaned = clean_logits(picked, cleanup, MASK_THRESHOLD)
    # One mask at a time: the float logits at full size are the largest thing held (48 MB for 12 MP).
    masks = np.stack([upscale_logits(one, picture_height, picture_width) > MASK_THRESHOLD for one in cleaned])
    areas = np.count_nonzero(masks.reshape(len(chosen), -1), axis=1).astype(np.int64)
    boxes = np.array([mask_formats.box(m) for m in masks], dtype=np.int64).reshape(-1, 4)
    return SamMasks(masks=masks, ious=scores[chosen], low_res=picked, indices=chosen, areas=areas, boxes=boxes)
