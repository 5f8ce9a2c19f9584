"""ImageNet normalisation on the device, as the matte networks take their input (the constants are
craftai_models.imagenet's)."""

from __future__ import annotations

import torch
from torch import Tensor

from craftai_models import imagenet


def normalise_imagenet(chw: Tensor) -> Tensor:
    """(1, 3, H, W) float in [0, 255] -> ImageNet-normalised."""
    x = chw / 255.0
    mean = torch.tensor(imagenet.MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(imagenet.STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std
