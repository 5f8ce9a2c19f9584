"""Any-size matte with InSPyReNet Swin-B (the definitions are in docs/MATTE.md).

- long side <= 1280 px: the network sees the picture at full resolution, reflect-padded on the
  right/bottom to a multiple of 32; the matte is cropped back.
- long side > 1280 px: reflect-padded on the right/bottom to a square, reduced with antialiased
  Lanczos-3 (Pillow's coefficients, on the device: pipelines/resample.py) to 1280², the matte
  enlarged back bilinearly and cropped; when the
  reduction was below half scale, the matte is refined at full resolution with a colour guided
  filter on the tiles near the subject's edge only (pipelines/matte_refine.py, shared with BiRefNet).
- then the fringe shrink α' = clip((α − 0.2) / 0.8, 0, 1), and 8-bit rounding.

The network is any callable taking an ImageNet-normalised (1, 3, H, W) float tensor on `device`
and returning a (1, 1, H, W) matte in [0, 1] (craftai_models.inspyrenet.InSPyReNet is one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines.matte_refine import Refinement, edge_tiles, refine_edges, refine_radius
from craftai_infer.pipelines.normalise import normalise_imagenet
from craftai_infer.pipelines.resample import reflect_pad, resize_lanczos

__all__ = [
    "MatteNetwork",
    "MatteSettings",
    "fringe_shrink",
    "matte_inspyrenet",
    "matte_inspyrenet_batch",
    "matte_inspyrenet_float",
    "network_input",
    "network_shape",
    "refined_tiles",
    "tile_count",
]

MatteNetwork = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class MatteSettings:
    """The pipeline's constants (docs/MATTE.md says why each has its value)."""

    max_side: int = 1280  # the network's largest input side
    multiple: int = 32  # the backbone's total stride
    refine_below_scale: float = 0.5  # guided-filter refinement when the reduction is below this
    tile: int = 256  # refinement tile side, full-resolution pixels
    edge_margin: float = 0.01  # "~0" is <= this, "~1" is >= 1 - this
    eps: float = 1e-4  # guided filter ε, guide in [0, 1] (colour units squared)
    fringe: float = 0.2  # fringe shrink black point

    @property
    def refinement(self) -> Refinement:
        return Refinement(tile=self.tile, edge_margin=self.edge_margin, eps=self.eps)


def fringe_shrink(alpha: Tensor, black: float = 0.2) -> Tensor:
    """α' = clip((α − black) / (1 − black), 0, 1): drops the faint halo, keeps 1 at 1, stays continuous."""
    if not 0.0 <= black < 1.0:
        raise ValueError("the black point must be in [0, 1)")
    return ((alpha - black) / (1.0 - black)).clamp(0.0, 1.0)


def _run(network: MatteNetwork, x: Tensor, autocast: torch.dtype | None) -> Tensor:
    with torch.inference_mode(), torch.autocast(x.device.type, dtype=autocast, enabled=autocast is not None):
        out = network(x)
    return out.float().clamp(0.0, 1.0)


@dataclass(frozen=True)
class NetworkInput:
    """A picture on the device and the network input made from it (stage one of the pipeline)."""

    pixels: Tensor  # (H, W, 3) uint8
    x: Tensor  # (1, 3, h, w) ImageNet-normalised: padded to a multiple of 32, or reduced to 1280²
    reduced: bool  # the picture was over `max_side` (padded to a square and reduced)


def network_shape(height: int, width: int, settings: MatteSettings = MatteSettings()) -> tuple[int, int]:
    """The network input's size for a picture: pictures with the same one can run as one batch."""
    if max(height, width) > settings.max_side:
        return settings.max_side, settings.max_side
    m = settings.multiple
    return -(-height // m) * m, -(-width // m) * m


# What making the network input and enlarging its output back holds on the CPU, beyond the picture
# (tests/unit/test_matte_memory.py measures it): the 1280² input and its resampling, then per pixel
# of the picture its float copy, the enlarged matte, the refinement's planes; a picture over
# max_side is first reflect-padded to a square, in float.
INPUT_FIXED_BYTES = 64 << 20
INPUT_BYTES_PER_PIXEL = 40
PADDED_BYTES_PER_PIXEL = 12


def input_bytes(height: int, width: int, settings: MatteSettings = MatteSettings()) -> int:
    """An upper bound of what the pipeline holds on the CPU for a picture, beyond the picture."""
    pixels = height * width
    side = max(height, width)
    padded = side * side - pixels if side > settings.max_side else 0
    return INPUT_FIXED_BYTES + INPUT_BYTES_PER_PIXEL * pixels + PADDED_BYTES_PER_PIXEL * padded


def network_input(
    rgb: np.ndarray,
    device: torch.device,
    settings: MatteSettings = MatteSettings(),
    upload: Callable[[np.ndarray], Tensor] | None = None,
) -> NetworkInput:
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError(f"expected an (H, W, 3) uint8 picture, got {rgb.dtype} {rgb.shape}")
    h, w = rgb.shape[:2]
    # Decoded on the CPU; from here on everything runs on the device (one host-to-device copy).
    if upload is not None:
        pixels = upload(rgb)
    else:
        pixels = torch.from_numpy(np.require(rgb, requirements=("C", "W"))).to(device)
    chw = pixels.permute(2, 0, 1).unsqueeze(0).float()  # (1, 3, H, W) in [0, 255]
    if max(h, w) <= settings.max_side:
        return NetworkInput(pixels, normalise_imagenet(reflect_pad(chw, *network_shape(h, w, settings))), reduced=False)
    side = max(h, w)
    n = settings.max_side
    reduced = resize_lanczos(reflect_pad(chw, side, side), n, n).clamp(0.0, 255.0)
    return NetworkInput(pixels, normalise_imagenet(reduced), reduced=True)


def _enlarged(prepared: NetworkInput, out: Tensor) -> Tensor:
    """A reduced picture's network output enlarged back to the picture: (1, 1, H, W)."""
    h, w = prepared.pixels.shape[:2]
    side = max(h, w)
    return F.interpolate(out, size=(side, side), mode="bilinear", align_corners=False)[:, :, :h, :w]


def _refine_scale(prepared: NetworkInput, settings: MatteSettings) -> float | None:
    """The reduction's scale when the matte is refined, else None."""
    scale = settings.max_side / max(prepared.pixels.shape[:2])
    return scale if prepared.reduced and scale < settings.refine_below_scale else None


def matte_from_network(prepared: NetworkInput, out: Tensor, settings: MatteSettings = MatteSettings()) -> Tensor:
    """Stage three: the network's (1, 1, h, w) output -> the matte before the fringe shrink, (H, W)."""
    h, w = prepared.pixels.shape[:2]
    if not prepared.reduced:
        return out[0, 0, :h, :w]
    alpha = _enlarged(prepared, out)
    scale = _refine_scale(prepared, settings)
    if scale is not None:
        alpha = refine_edges(prepared.pixels, alpha.contiguous(), refine_radius(scale), settings.refinement)
    return alpha[0, 0]


def refined_tiles(prepared: NetworkInput, out: Tensor, settings: MatteSettings = MatteSettings()) -> int:
    """How many tiles the edge refinement filters for this network output (0 when it does not
    refine), of `tile_count`: what a benchmark reports, so that its timing is seen to include them."""
    scale = _refine_scale(prepared, settings)
    if scale is None:
        return 0
    margin = 2 * refine_radius(scale)
    return len(edge_tiles(_enlarged(prepared, out).contiguous(), settings.tile, margin, settings.edge_margin))


def tile_count(height: int, width: int, settings: MatteSettings = MatteSettings()) -> int:
    """The tiles of a picture (the refinement's candidates)."""
    return math.ceil(height / settings.tile) * math.ceil(width / settings.tile)


def matte_inspyrenet_float(
    rgb: np.ndarray,
    network: MatteNetwork,
    *,
    device: torch.device | str = "cpu",
    autocast: torch.dtype | None = None,
    settings: MatteSettings = MatteSettings(),
    upload: Callable[[np.ndarray], Tensor] | None = None,
) -> Tensor:
    """The matte before the fringe shrink and rounding: (H, W) float32 in [0, 1] on `device`."""
    prepared = network_input(rgb, torch.device(device), settings, upload)
    return matte_from_network(prepared, _run(network, prepared.x, autocast), settings)


def _to_uint8_tensor(alpha: Tensor, settings: MatteSettings) -> Tensor:
    """The fringe shrink and 8-bit rounding, on alpha's device."""
    return torch.floor(fringe_shrink(alpha, settings.fringe) * 255.0 + 0.5).to(torch.uint8)


def _to_uint8(alpha: Tensor, settings: MatteSettings) -> np.ndarray:
    out: np.ndarray = _to_uint8_tensor(alpha, settings).cpu().numpy()
    return out


def matte_inspyrenet(
    rgb: np.ndarray,
    network: MatteNetwork,
    *,
    device: torch.device | str = "cpu",
    autocast: torch.dtype | None = None,
    settings: MatteSettings = MatteSettings(),
    upload: Callable[[np.ndarray], Tensor] | None = None,
) -> np.ndarray:
    """The picture's matte: (H, W) uint8, white = subject, exactly the picture's size."""
    return _to_uint8(
        matte_inspyrenet_float(rgb, network, device=device, autocast=autocast, settings=settings, upload=upload),
        settings,
    )


def matte_inspyrenet_batch(
    pictures: Sequence[np.ndarray],
    network: MatteNetwork,
    *,
    device: torch.device | str = "cpu",
    autocast: torch.dtype | None = None,
    settings: MatteSettings = MatteSettings(),
    upload: Callable[[np.ndarray], Tensor] | None = None,
) -> list[Tensor]:
    """Several pictures whose network inputs have the same shape (`network_shape`): one forward for
    all, each picture's matte the same as alone (the min-max normalisation is per picture). Each
    matte is left on `device`, an (H, W) uint8 tensor: the outputs are made there
    (craftai_infer.pipelines.matte_outputs)."""
    prepared = [network_input(rgb, torch.device(device), settings, upload) for rgb in pictures]
    out = _run(network, torch.cat([p.x for p in prepared]), autocast)
    return [_to_uint8_tensor(matte_from_network(p, out[i : i + 1], settings), settings) for i, p in enumerate(prepared)]
