"""Meta's automatic mask generator and mask clean-up, runnable on this machine's CPU torch.

`sam2.automatic_mask_generator` imports `batched_nms` and `box_area` from `torchvision.ops.boxes`,
and the clean-up (`SAM2Transforms.postprocess_masks` with max_hole_area / max_sprinkle_area)
calls `sam2._C.get_connected_componnets`, a CUDA kernel the CPU reference install does not build
(SAM2_BUILD_CUDA=0; Meta's code then warns and skips the clean-up). PyPI's torchvision does not
import beside the pinned CPU torch (craftai_dev.sam_fixture), so both are stood in for here,
each independent of this project's code and written to be obviously correct rather than fast:

* NMS: the textbook greedy loop in plain Python floats (best score first, a box dropped when its
  IoU with a kept one is above the threshold; areas (x1 - x0) * (y1 - y0) as torchvision's);
* connected components: scipy.ndimage.label with the 3x3 structure (8-connectivity, which is
  what Meta's kernel computes: sam2/csrc/connected_components.cu labels 2x2 blocks with
  block-based union-find), each pixel's label and its region's area as the kernel answers them.

Everything else (grid, batching, filters, stability score, boxes, RLE) is Meta's own code.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

import numpy as np
import torch

from craftai_dev import sam_fixture


def plain_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS over Python floats; indices kept, best score first (ties in input order)."""
    b = boxes.tolist()
    order = sorted(range(len(b)), key=lambda i: -float(scores[i]))
    kept: list[int] = []
    for i in order:
        x0, y0, x1, y1 = b[i]
        area_i = (x1 - x0) * (y1 - y0)
        dropped = False
        for j in kept:
            u0, v0, u1, v1 = b[j]
            inter = max(0.0, min(x1, u1) - max(x0, u0)) * max(0.0, min(y1, v1) - max(y0, v0))
            union = area_i + (u1 - u0) * (v1 - v0) - inter
            if union > 0 and inter / union > iou_threshold:
                dropped = True
                break
        if not dropped:
            kept.append(i)
    return torch.tensor(kept, dtype=torch.int64)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision.ops.batched_nms: NMS within each category (the generator uses one category)."""
    kept: list[int] = []
    for category in torch.unique(idxs).tolist():
        members = torch.nonzero(idxs == category).flatten()
        kept += members[plain_nms(boxes[members], scores[members], iou_threshold)].tolist()
    return torch.tensor(sorted(kept, key=lambda i: -float(scores[i])), dtype=torch.int64)


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def connected_components(mask: torch.Tensor) -> list[torch.Tensor]:
    """sam2._C.get_connected_componnets: [N, 1, H, W] uint8 -> labels and each pixel's region area."""
    from scipy import ndimage  # type: ignore[import-untyped]

    x = mask.cpu().numpy()
    labels = np.zeros(x.shape, np.int32)
    areas = np.zeros(x.shape, np.int32)
    for n in range(x.shape[0]):
        found, _ = ndimage.label(x[n, 0], structure=np.ones((3, 3), dtype=np.int32))
        sizes = np.bincount(found.ravel())
        sizes[0] = 0
        labels[n, 0] = found
        areas[n, 0] = sizes[found]
    return [torch.from_numpy(labels), torch.from_numpy(areas)]


def _real_torchvision_ops() -> bool:
    """A torchvision that imports (the GPU machine may have one) is used as it is."""
    if not hasattr(sys.modules.get("torchvision"), "__file__"):
        return False
    try:
        import torchvision.ops.boxes  # noqa: F401
    except (ImportError, RuntimeError):
        return False
    return True


def install_standins() -> None:
    """torchvision.ops.boxes and sam2._C as above (and sam_fixture's torchvision transforms)."""
    sam_fixture._install_torchvision_standin()
    if "torchvision.ops.boxes" not in sys.modules and not _real_torchvision_ops():
        ops = types.ModuleType("torchvision.ops")
        boxes = types.ModuleType("torchvision.ops.boxes")
        boxes.batched_nms = batched_nms  # type: ignore[attr-defined]
        boxes.box_area = box_area  # type: ignore[attr-defined]
        ops.boxes = boxes  # type: ignore[attr-defined]
        sys.modules["torchvision.ops"] = ops
        sys.modules["torchvision.ops.boxes"] = boxes
        sys.modules["torchvision"].ops = ops  # type: ignore[attr-defined]
    import sam2

    with contextlib.suppress(ImportError):
        from sam2 import _C  # noqa: F401  (Meta's kernel, where it was built: the GPU machine)
    if "sam2._C" not in sys.modules:
        kernel = types.ModuleType("sam2._C")
        kernel.get_connected_componnets = connected_components  # type: ignore[attr-defined]
        sys.modules["sam2._C"] = kernel
        sam2._C = kernel


def generator(model: Any, **parameters: Any) -> Any:
    """Meta's SAM2AutomaticMaskGenerator around the reference model (sam_fixture.reference_model)."""
    install_standins()
    from sam2.automatic_mask_generator import SAM2AutomaticMaskGenerator

    return SAM2AutomaticMaskGenerator(model, output_mode="uncompressed_rle", **parameters)


def transforms(max_hole_area: int, max_sprinkle_area: int) -> Any:
    """Meta's SAM2Transforms, whose postprocess_masks is the predictor's clean-up and upscale."""
    install_standins()
    from sam2.utils.transforms import SAM2Transforms

    return SAM2Transforms(1024, 0.0, max_hole_area=max_hole_area, max_sprinkle_area=max_sprinkle_area)
