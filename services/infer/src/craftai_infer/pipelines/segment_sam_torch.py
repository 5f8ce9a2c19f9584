"""image.segment on torch: the pre- and post-processing of craftai_infer.pipelines.segment_sam, on the device.

The same answers as the numpy functions there (the onnxruntime route's), computed where the
tensors are: the square 1024² antialiased resize and the ImageNet normalisation of a picture
already on the device, and the bilinear upscale of the chosen low-res logits to the picture's size
and the threshold, with each mask's area and box, so that only the boolean mask and a few numbers
come back to the host. A picture's embedding (`TorchSamEmbedding`) stays on the device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup, clean_logits
from craftai_infer.pipelines.segment_sam import MASK_THRESHOLD, MEAN, STD, SamMasks, order_by_score
from craftai_models.sam2.contract import IMAGE_SIZE, LOW_RES


@dataclass(frozen=True, eq=False)
class TorchSamEmbedding:
    """The encoder's three outputs for one picture, kept on the device."""

    high_res_feats_0: torch.Tensor  # [1, 32, 256, 256]
    high_res_feats_1: torch.Tensor  # [1, 64, 128, 128]
    image_embed: torch.Tensor  # [1, 256, 64, 64]
    picture_height: int
    picture_width: int

    def to(self, device: torch.device) -> TorchSamEmbedding:
        """The same embedding on `device`: itself when it is there already, else a copy (after a
        fall back to the CPU, sessions keep working)."""
        if self.image_embed.device == device:
            return self
        return TorchSamEmbedding(
            self.high_res_feats_0.to(device),
            self.high_res_feats_1.to(device),
            self.image_embed.to(device),
            self.picture_height,
            self.picture_width,
        )

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.high_res_feats_0, self.high_res_feats_1, self.image_embed)
        )


def network_input(pixels: torch.Tensor) -> torch.Tensor:
    """(H, W, 3) uint8 on the device -> [1, 3, 1024, 1024] normalised (antialiased when shrinking,
    as torchvision's Resize on a tensor, which calls this same interpolation)."""
    x = pixels.permute(2, 0, 1)[None].float() / 255.0
    x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False, antialias=True)
    mean, std = _statistics(x.device)
    return (x - mean) / std


@functools.cache
def _statistics(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ImageNet mean and std as [1, 3, 1, 1] tensors, made once per device (not one copy per picture)."""
    return torch.as_tensor(MEAN, device=device).view(1, 3, 1, 1), torch.as_tensor(STD, device=device).view(1, 3, 1, 1)


def boxes_of(masks: torch.Tensor) -> torch.Tensor:
    """Meta's batched_mask_to_box on [K, H, W] booleans: [K, 4] int64, last pixel included, zeros when empty."""
    _, h, w = masks.shape
    rows = masks.any(dim=2)  # [K, H]
    cols = masks.any(dim=1)  # [K, W]
    ys = torch.arange(h, device=masks.device)
    xs = torch.arange(w, device=masks.device)
    top = torch.where(rows, ys, h).amin(dim=1)
    bottom = torch.where(rows, ys, -1).amax(dim=1)
    left = torch.where(cols, xs, w).amin(dim=1)
    right = torch.where(cols, xs, -1).amax(dim=1)
    out = torch.stack([left, top, right, bottom], dim=1)
    return torch.where(rows.any(dim=1)[:, None], out, torch.zeros_like(out))


def to_host(*tensors: torch.Tensor) -> list[np.ndarray]:
    """Device tensors as host arrays, in one wait: on a GPU, copied into page-locked blocks of
    torch's caching host allocator (a mask read back into fresh pageable memory made a click slower
    through the server than in a loop: page faults and the staged copy; docs/PERFORMANCE.md, "The
    SAM click through gRPC"), each array keeping its block alive."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.contiguous().numpy() for t in tensors]
    hosts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    for host, t in zip(hosts, tensors, strict=True):
        host.copy_(t, non_blocking=True)
    torch.cuda.current_stream(tensors[0].device).synchronize()
    return [h.numpy() for h in hosts]


def answer(
    low_res: torch.Tensor,
    ious: torch.Tensor,
    height: int,
    width: int,
    *,
    all_masks: bool,
    cleanup: Cleanup = NO_CLEANUP,
) -> SamMasks:
    """One prompt's decoder outputs (logits [3, 256, 256], IoUs [3], on the device) -> masks at the
    picture's size, best first (upscaled and thresholded on the device, with their areas and boxes;
    the clean-up, when asked, on the host: connected regions of 256² logits)."""
    scores = ious.float().cpu().numpy()  # the one read-back the choice needs
    chosen = order_by_score(scores, all_masks=all_masks)
    index = torch.from_numpy(chosen).to(low_res.device)
    with torch.inference_mode():
        picked = low_res.index_select(0, index)  # [K, 256, 256]
        source = picked
        if cleanup.active:
            cleaned = clean_logits(picked.float().cpu().numpy(), cleanup, MASK_THRESHOLD)
            source = torch.from_numpy(cleaned).to(low_res.device)
        up = F.interpolate(source[:, None], size=(height, width), mode="bilinear", align_corners=False)[:, 0]
        masks = up > MASK_THRESHOLD
        areas = masks.flatten(1).sum(dim=1)
        boxes = boxes_of(masks) + torch.tensor([0, 0, 1, 1], device=masks.device)  # past the last pixel
        numbers = torch.where(areas[:, None] > 0, torch.cat([areas[:, None], boxes], dim=1), 0)
        host_masks, host_numbers, low = to_host(masks, numbers, picked.float())
    return SamMasks(
        masks=host_masks,
        ious=scores[chosen],
        low_res=low.reshape(-1, LOW_RES, LOW_RES),
        indices=chosen,
        areas=host_numbers[:, 0].astype(np.int64),
        boxes=host_numbers[:, 1:].astype(np.int64),
    )
