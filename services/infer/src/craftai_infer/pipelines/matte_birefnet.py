"""Any-size matte with BiRefNet_lite (docs/MATTE.md, "BiRefNet_lite"): one pipeline for both
routes (the network in PyTorch, or the published ONNX graph on onnxruntime), the authors' inference
around the network (their tutorial's torchvision transforms, nobg's post-processing):

- the picture (RGB; a transparent one over white) is squashed to the network's square input by
  torchvision's `Resize((1024, 1024))` on the picture: Pillow's antialiased bilinear on the 8-bit
  picture, in two 8-bit passes, horizontal first (here the same arithmetic on the device, bit for
  bit: pipelines/pillow_resize.py), /255, ImageNet mean/std;
- the network's logits -> sigmoid, as the authors' (no min-max normalisation);
- back to the picture's size by plain bilinear interpolation (align_corners=False, no
  antialiasing when reducing), as nobg's post-processing;
- when the enlargement is at least 2× (the picture's long side 2048 px or more), refined at full
  resolution with the colour guided filter on the tiles near the subject's edge (the refinement
  InSPyReNet's pipeline has too: pipelines/matte_refine.py, radius ⌈3/scale⌉): below that it
  made the edges worse, from there on better, in the measurement of docs/MATTE.md (the refinement
  study's `--birefnet` case);
- ⌊255·α + 0.5⌋.

The network is any callable taking an ImageNet-normalised (N, 3, S, S) float tensor on `device`
and returning (N, 1, S, S) logits (craftai_models.birefnet.BiRefNet is one; the onnxruntime route
wraps its session in one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines.matte_refine import Refinement, refine_edges, refine_radius
from craftai_infer.pipelines.normalise import normalise_imagenet
from craftai_infer.pipelines.pillow_resize import resize_bilinear_u8

__all__ = ["BirefnetSettings", "matte_birefnet_batch", "matte_birefnet_float"]

Network = Callable[[Tensor], Tensor]
Upload = Callable[[np.ndarray], Tensor]


@dataclass(frozen=True)
class BirefnetSettings:
    """The pipeline's constants (docs/MATTE.md says why each has its value)."""

    size: int = 1024  # the network's square input side (the lite model was trained at 1024²)
    refine_from: int = 2048  # guided-filter refinement from this long side on (enlargement >= 2x)
    tile: int = 256
    edge_margin: float = 0.01
    eps: float = 1e-4

    @property
    def refinement(self) -> Refinement:
        return Refinement(tile=self.tile, edge_margin=self.edge_margin, eps=self.eps)


# What making the network input and enlarging the matte back holds on the CPU, beyond the picture
# (tests/unit/test_matte_memory.py measures it): the 1024² input, then per pixel of the picture its
# float copy, the enlarged matte and the refinement's planes.
INPUT_FIXED_BYTES = 64 << 20
INPUT_BYTES_PER_PIXEL = 24
# The network's peak working memory on the CPU for one picture (its input is always 1024x1024;
# measured 1.25 GiB with torch, docs/SECURITY.md "Memory").
NETWORK_BYTES = 1400 << 20


def input_bytes(height: int, width: int) -> int:
    """An upper bound of what the pipeline holds on the CPU for a picture, beyond the picture."""
    return INPUT_FIXED_BYTES + INPUT_BYTES_PER_PIXEL * height * width


def _resize(x: Tensor, height: int, width: int) -> Tensor:
    """Plain bilinear (align_corners=False, no antialiasing): interpolation between the two nearest
    samples, as nobg brings the authors' matte back."""
    if tuple(x.shape[-2:]) == (height, width):
        return x
    return F.interpolate(x, size=(height, width), mode="bilinear", align_corners=False)


def _pixels(rgb: np.ndarray, device: torch.device, upload: Upload | None) -> Tensor:
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError(f"expected an (H, W, 3) uint8 picture, got {rgb.dtype} {rgb.shape}")
    if upload is not None:
        return upload(rgb)
    return torch.from_numpy(np.require(rgb, requirements=("C", "W"))).to(device)


def network_input(pixels: Tensor, settings: BirefnetSettings = BirefnetSettings()) -> Tensor:
    """(H, W, 3) uint8 on the device -> (1, 3, S, S) ImageNet-normalised: the picture squashed by
    Pillow's 8-bit bilinear resize, bit for bit (pipelines/pillow_resize.py), as the authors'
    torchvision transforms squash it."""
    squashed = resize_bilinear_u8(pixels, settings.size, settings.size)
    return normalise_imagenet(squashed.permute(2, 0, 1).unsqueeze(0).float())


def matte_from_logits(pixels: Tensor, logits: Tensor, settings: BirefnetSettings = BirefnetSettings()) -> Tensor:
    """(1, 1, S, S) logits -> the matte at the picture's size, (H, W) float32 in [0, 1]."""
    h, w = pixels.shape[:2]
    alpha = _resize(torch.sigmoid(logits.float()), h, w).clamp(0.0, 1.0)
    if max(h, w) >= settings.refine_from:
        scale = settings.size / max(h, w)
        alpha = refine_edges(pixels, alpha.contiguous(), refine_radius(scale), settings.refinement)
    return alpha[0, 0]


def _run(network: Network, x: Tensor, autocast: torch.dtype | None) -> Tensor:
    with torch.inference_mode(), torch.autocast(x.device.type, dtype=autocast, enabled=autocast is not None):
        out = network(x)
    return out.float()


def matte_birefnet_float(
    rgb: np.ndarray,
    network: Network,
    *,
    device: torch.device | str = "cpu",
    autocast: torch.dtype | None = None,
    settings: BirefnetSettings = BirefnetSettings(),
    upload: Upload | None = None,
) -> Tensor:
    """The matte before rounding: (H, W) float32 in [0, 1] on `device`."""
    pixels = _pixels(rgb, torch.device(device), upload)
    return matte_from_logits(pixels, _run(network, network_input(pixels, settings), autocast), settings)


def _to_uint8(alpha: Tensor) -> Tensor:
    """⌊255·α + 0.5⌋ on alpha's device."""
    return torch.floor(alpha * 255.0 + 0.5).to(torch.uint8)


def matte_birefnet_batch(
    pictures: Sequence[np.ndarray],
    network: Network,
    *,
    device: torch.device | str = "cpu",
    autocast: torch.dtype | None = None,
    settings: BirefnetSettings = BirefnetSettings(),
    upload: Upload | None = None,
) -> list[Tensor]:
    """Several pictures of any sizes in one forward (every picture becomes an S×S input); each
    matte the same as alone. Each matte is left on `device`, an (H, W) uint8 tensor: the outputs
    are made there (craftai_infer.pipelines.matte_outputs)."""
    pixels = [_pixels(rgb, torch.device(device), upload) for rgb in pictures]
    logits = _run(network, torch.cat([network_input(p, settings) for p in pixels]), autocast)
    return [_to_uint8(matte_from_logits(p, logits[i : i + 1], settings)) for i, p in enumerate(pixels)]
