"""SAM 2.1 tiny for the tests: the random-weight fixture and Meta's reference predictor on the same weights.

`fixture()` returns the cached encoder.onnx / decoder.onnx / weights.safetensors made by
craftai_dev.sam21 (about a minute the first time on 2 cores, then instant).

`reference_predictor()` is Meta's `SAM2ImagePredictor` around the reference network with those
weights. PyPI's torchvision cannot be imported beside the CPU torch pinned here (its compiled
operators need libtorch_cuda: "operator torchvision::nms does not exist"), and `sam2.utils.transforms`
imports three transforms from it. Those three are stood in for below, each the documented behaviour
of torchvision's class on a tensor (ToTensor: HWC uint8 -> CHW float in [0, 1]; Resize((h, w)) ->
`F.interpolate(bilinear, align_corners=False, antialias=True)`; Normalize -> (x - mean) / std); every
other step (the jit-scripted transform chain, coordinate scaling, box-first concatenation, prompt
encoder, decoder, upscaling) is Meta's own code.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from craftai_dev import sam21

Sam21Fixture = sam21.Sam21Fixture


def fixture(cache_dir: Path | None = None) -> sam21.Sam21Fixture:
    """The default-seed fixture, generated into <repo>/.cache/fixtures on first use."""
    return sam21.ensure_fixture(cache_dir)


class _ToTensor:
    """torchvision.transforms.ToTensor for an HWC uint8 numpy array."""

    def __call__(self, picture: np.ndarray[Any, Any]) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(picture.transpose(2, 0, 1)))
        return tensor.to(torch.float32).div(255)


class _Resize(nn.Module):
    """torchvision.transforms.Resize((h, w)) on a float CHW tensor (bilinear, antialias=True)."""

    def __init__(self, size: tuple[int, int]) -> None:
        super().__init__()
        self.size = [int(size[0]), int(size[1])]

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return F.interpolate(
            image.unsqueeze(0), size=self.size, mode="bilinear", align_corners=False, antialias=True
        ).squeeze(0)


class _Normalize(nn.Module):
    """torchvision.transforms.Normalize(mean, std) on a float CHW tensor."""

    def __init__(self, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.mean = mean
        self.std = std

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(self.mean, dtype=image.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=image.dtype).view(-1, 1, 1)
        return image.sub(mean).div(std)


def _install_torchvision_standin() -> None:
    """Make `from torchvision.transforms import Normalize, Resize, ToTensor` work without torchvision."""
    if "torchvision.transforms" in sys.modules:
        return
    try:
        import torchvision.transforms  # noqa: F401  (a working torchvision is used as it is)
    except (ImportError, RuntimeError):
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]  # a half-imported torchvision must not linger
        package = types.ModuleType("torchvision")
        transforms = types.ModuleType("torchvision.transforms")
        transforms.ToTensor = _ToTensor  # type: ignore[attr-defined]
        transforms.Resize = _Resize  # type: ignore[attr-defined]
        transforms.Normalize = _Normalize  # type: ignore[attr-defined]
        package.transforms = transforms  # type: ignore[attr-defined]
        sys.modules["torchvision"] = package
        sys.modules["torchvision.transforms"] = transforms


def reference_model(weights: Path) -> Any:
    """Meta's SAM2Base (sam2.1 hiera tiny, Meta's config) with the fixture's random weights."""
    from safetensors.torch import load_file

    model = sam21.build_reference_model()
    model.load_state_dict(load_file(str(weights)), strict=True)
    return model.eval()


def reference_predictor(model: Any) -> Any:
    """Meta's SAM2ImagePredictor (defaults: threshold 0, no hole filling) around `reference_model(...)`.

    Predictors are cheap and may share one model: keep one per picture to keep its embedding.
    """
    _install_torchvision_standin()
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    return SAM2ImagePredictor(model)
