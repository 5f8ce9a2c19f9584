"""Meta's optional mask clean-up (`SAM2ImagePredictor(max_hole_area, max_sprinkle_area)`), on the
low-res logits before they are upscaled, as `SAM2Transforms.postprocess_masks` does it:

* holes: the 8-connected regions of background (logit <= threshold) of at most `max_hole_area`
  low-res pixels are set to threshold + 10 (selected). Every such region counts, also one that
  touches the border: Meta does not ask that a hole be enclosed;
* sprinkles: the 8-connected regions of selected pixels (logit > threshold) of at most
  `max_sprinkle_area` pixels are set to threshold - 10 (background).

Both kinds of region are found on the logits as the decoder answered them (Meta labels the
sprinkles on its input, not on the hole-filled result), so the two sets never overlap.
Connectivity: Meta's kernel (sam2/csrc/connected_components.cu, block-based union-find over 2x2
blocks) is 8-connected, and so is OpenCV's labelling with connectivity=8 used here; only which
pixels share a region and its area matter, not the label numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
Bool = npt.NDArray[np.bool_]
FILL = 10.0  # Meta's: threshold +- 10 for the pixels changed


@dataclass(frozen=True)
class Cleanup:
    """Areas in low-res (256x256) pixels; 0 turns each step off (the default: nothing changes)."""

    max_hole_area: int = 0
    max_sprinkle_area: int = 0

    def __post_init__(self) -> None:
        if self.max_hole_area < 0 or self.max_sprinkle_area < 0:
            raise ValueError("max_hole_area and max_sprinkle_area are areas: 0 (off) or more")

    @property
    def active(self) -> bool:
        return self.max_hole_area > 0 or self.max_sprinkle_area > 0


NO_CLEANUP = Cleanup()


def small_regions(selected: Bool, max_area: int) -> Bool:
    """Pixels of `selected` (H, W) that lie in an 8-connected region of at most `max_area` pixels."""
    _, labels, stats, _ = cv2.connectedComponentsWithStats(selected.astype(np.uint8), connectivity=8)
    areas = stats[:, cv2.CC_STAT_AREA].copy()
    areas[0] = max_area + 1  # label 0 is everything outside `selected`
    small: Bool = (areas <= max_area)[labels]
    return small


def clean_logits(logits: F32, cleanup: Cleanup, threshold: float = 0.0) -> F32:
    """Low-res logits [..., H, W] with small holes filled and small islands removed (a copy; the
    input is returned as it is when the clean-up is off)."""
    if not cleanup.active:
        return logits
    out = np.array(logits, dtype=np.float32, copy=True)
    flat = out.reshape(-1, *out.shape[-2:])
    source = np.asarray(logits, dtype=np.float32).reshape(flat.shape)
    for one, original in zip(flat, source, strict=True):
        if cleanup.max_hole_area > 0:
            one[small_regions(original <= threshold, cleanup.max_hole_area)] = threshold + FILL
        if cleanup.max_sprinkle_area > 0:
            one[small_regions(original > threshold, cleanup.max_sprinkle_area)] = threshold - FILL
    return out
