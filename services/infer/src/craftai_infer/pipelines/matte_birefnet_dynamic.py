"""Any-size matte with BiRefNet_dynamic (docs/MATTE.md, "BiRefNet_dynamic"): the network at the
picture's own size, as its authors run it for inference at the original resolution
(ZhengPeng7/BiRefNet `inference.py` with `--resolution None`, `dataset.py` for the test split):

- the picture's RGB (an alpha channel dropped, as their reader drops it), resized by Pillow's
  default filter (bicubic, antialiased, 8-bit) to its own size with each side floored to a multiple
  of 32 (`input_size`: held within the sides the model was trained on, 256 to 2304, where the
  picture is outside them), /255, ImageNet mean/std;
- the network's logits -> sigmoid;
- back to the picture's size by bilinear interpolation with `align_corners=True`, in float;
- ⌊255·α⌋, as torchvision's `ToPILImage` writes their saved matte.

The network is any callable taking an ImageNet-normalised (1, 3, h, w) float tensor (h, w multiples
of 32) and returning (1, 1, h, w) logits: craftai_models.birefnet.BiRefNet is one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor

from craftai_infer.pipelines.normalise import normalise_imagenet

__all__ = ["MAX_SIDE", "MIN_SIDE", "MULTIPLE", "input_size", "matte_birefnet_dynamic", "network_input"]

Network = Callable[[Tensor], Tensor]

#: The sides the model was trained on (the authors' `dynamic_size`, 256 to 2304 for either side).
MIN_SIDE = 256
MAX_SIDE = 2304
#: The network halves its input five times.
MULTIPLE = 32


def input_size(height: int, width: int) -> tuple[int, int]:
    """The network's (height, width) for a picture: its own size, each side floored to a multiple of
    32, as the authors' inference at the original resolution; a picture larger than the trained sides
    reduced first so that its long side is 2304 (its aspect kept), and a side under 256 (after that)
    raised to 256 (a stretch, as the training's independent sides were)."""
    if height < 1 or width < 1:
        raise ValueError(f"a picture of {width}x{height} has no pixels")
    longest = max(height, width, MAX_SIDE)  # the reduction, in integers: 3000x4000 is 1728x2304 exactly

    def side(length: int) -> int:
        return min(MAX_SIDE, max(MIN_SIDE, length * MAX_SIDE // longest // MULTIPLE * MULTIPLE))

    return side(height), side(width)


def network_input(picture: npt.NDArray[np.uint8]) -> Tensor:
    """(H, W, 3 or 4) uint8 -> (1, 3, h, w) ImageNet-normalised float32 on the CPU: the RGB resized
    by Pillow's bicubic to `input_size` (not at all where that is the picture's size)."""
    if picture.ndim != 3 or picture.shape[2] not in (3, 4) or picture.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3 or 4) uint8 picture, got {picture.dtype} {picture.shape}")
    rgb = np.ascontiguousarray(picture[:, :, :3])
    height, width = input_size(*rgb.shape[:2])
    if (height, width) != rgb.shape[:2]:
        rgb = np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BICUBIC))
    chw = torch.from_numpy(np.require(rgb, requirements=("C", "W"))).permute(2, 0, 1).unsqueeze(0).float()
    return normalise_imagenet(chw)


def matte_from_logits(logits: Tensor, height: int, width: int) -> Tensor:
    """(1, 1, h, w) logits -> the (H, W) uint8 matte on the logits' device."""
    alpha = F.interpolate(torch.sigmoid(logits.float()), size=(height, width), mode="bilinear", align_corners=True)
    return (alpha[0, 0] * 255.0).to(torch.uint8)


def matte_birefnet_dynamic(
    picture: npt.NDArray[np.uint8],
    network: Network,
    *,
    device: torch.device | str = "cpu",
    autocast: torch.dtype | None = None,
) -> Tensor:
    """One picture's (H, W) uint8 matte, left on `device` (the outputs are made there)."""
    x = network_input(picture).to(device)
    with torch.inference_mode(), torch.autocast(x.device.type, dtype=autocast, enabled=autocast is not None):
        logits = network(x)
    return matte_from_logits(logits, picture.shape[0], picture.shape[1])
