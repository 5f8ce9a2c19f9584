"""What image.matte makes from a matte, on the device that made the matte (docs/MATTE.md):
the cutout (foreground colours estimated, or the picture's own), a composite over a new
background, a hard mask. Arrays in, arrays out: torch on the route's device (CPU or GPU), the
answers read back as host uint8 arrays for the encoders. docs/API.md and docs/MATTE.md define
each output; the definitions are these.

- alpha: the matte, times the picture's own alpha when it has one (a * b // 255, rounded down).
- cutout: RGBA with straight alpha = alpha; colours = the foreground colours estimated by
  pipelines/foreground.py (F rounded to 8 bits, half up), or the picture's colours when `naive`.
- composite: the cutout over a background, in premultiplied arithmetic on the 8-bit values,
  exactly: with A the cutout's alpha, F its colour, C_b, A_b the background's (straight) colour and
  alpha, all in 0..255,
      n = F·A·255 + C_b·A_b·(255 − A),   d = A·255 + A_b·(255 − A),
      colour = ⌊n/d + ½⌋ (0 where d = 0),  alpha = ⌊d/255 + ½⌋,
  integer arithmetic (the same bytes on every device). Over an opaque background (A_b = 255
  everywhere: a solid colour with alpha 255, a blur, an opaque picture) it is RGB.
  Backgrounds: a solid RGBA colour; a blur of the picture (transparency over white), a Gaussian
  of standard deviation `radius` (Pillow's GaussianBlur convention) approximated by three box
  blurs (Kovesi's sizes), windows clipped to the picture, rounded to 8 bits; another picture
  scaled to cover (scale = max(W/w, H/h), antialiased bicubic on premultiplied colours, the middle
  W×H kept, rounded to 8 bits).
- mask: alpha/255 > threshold (a selection: True inside).
"""

from __future__ import annotations

import math
import time
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines.foreground import estimate_foreground
from craftai_infer.pipelines.guided_filter import box_mean
from craftai_infer.pipelines.matte_spec import Background, Blur, OutputsSpec, Rendered, Solid
from craftai_infer.pipelines.picture import device_pixels

T = TypeVar("T")

__all__ = [
    "background_layer",
    "box_sizes",
    "combined_alpha",
    "composite",
    "cover",
    "cutout",
    "gaussian_blur",
    "hard_mask",
    "mask_level",
    "render",
]

U8 = npt.NDArray[np.uint8]


def combined_alpha(matte: Tensor, picture: Tensor) -> Tensor:
    """(H, W) uint8: the matte, times the picture's own alpha when it has one (a * b // 255)."""
    if picture.shape[2] == 3:
        return matte
    return (matte.to(torch.int32) * picture[:, :, 3].to(torch.int32) // 255).to(torch.uint8)


def mask_level(threshold: float) -> int:
    """The smallest 8-bit alpha v with v / 255 > threshold (float64): the mask is alpha >= this."""
    return int(np.searchsorted(np.arange(256) / 255.0, threshold, side="right"))


def hard_mask(alpha: Tensor, threshold: float) -> Tensor:
    """(H, W) bool: alpha / 255 > threshold."""
    level = mask_level(threshold)
    return alpha >= level if level <= 255 else torch.zeros_like(alpha, dtype=torch.bool)


def cutout(rgb: Tensor, alpha: Tensor, naive: bool = False) -> Tensor:
    """(H, W, 3) uint8 picture colours and (H, W) uint8 alpha -> (H, W, 4) uint8 RGBA, straight alpha:
    the estimated foreground colours, or the picture's own when `naive`."""
    if naive:
        colours = rgb
    else:
        # beside a GPU, the small levels (all launch overhead there) run on the CPU: the same answer
        coarse = torch.device("cpu") if rgb.device.type == "cuda" else None
        estimated = estimate_foreground(rgb.permute(2, 0, 1)[None], alpha[None, None], coarse_device=coarse)
        colours = torch.floor(estimated[0].permute(1, 2, 0) * 255.0 + 0.5).to(torch.uint8)
    return torch.cat([colours, alpha[:, :, None]], dim=2)


def composite(layer: Tensor, background: Tensor, opaque: bool) -> Tensor:
    """(H, W, 4) uint8 cutout over an (H, W, 4) uint8 straight-alpha background, exactly (module doc):
    (H, W, 3) when the background is opaque, else (H, W, 4) with straight alpha."""
    a = layer[:, :, 3:4].to(torch.int32)
    fg = layer[:, :, :3].to(torch.int32)
    bg = background[:, :, :3].to(torch.int32)
    bg_alpha = background[:, :, 3:4].to(torch.int32)
    num = fg * a * 255 + bg * bg_alpha * (255 - a)
    den = a * 255 + bg_alpha * (255 - a)
    colour = torch.where(den > 0, (2 * num + den) // (2 * den).clamp(min=1), 0).to(torch.uint8)
    if opaque:
        return colour
    alpha = ((2 * den + 255) // 510).to(torch.uint8)
    return torch.cat([colour, alpha], dim=2)


def box_sizes(sigma: float, passes: int = 3) -> list[int]:
    """Widths of `passes` box filters whose succession approximates a Gaussian of standard deviation
    `sigma` (Kovesi, "Fast almost-Gaussian filtering", 2010): odd widths wl and wl + 2, m of the first."""
    ideal = math.sqrt(12.0 * sigma * sigma / passes + 1.0)
    low = math.floor(ideal)
    if low % 2 == 0:
        low -= 1
    m = round((12.0 * sigma * sigma - passes * low * low - 4 * passes * low - 3 * passes) / (-4.0 * low - 4.0))
    return [low if i < m else low + 2 for i in range(passes)]


EXACT_BELOW = 3.0  # radii under this are blurred with the Gaussian itself: three boxes are too coarse there


def _gaussian(x: Tensor, sigma: float) -> Tensor:
    """The separable Gaussian (taps to 3σ), weights renormalised over the picture at its borders."""
    reach = math.ceil(3.0 * sigma)
    taps = torch.arange(-reach, reach + 1, dtype=torch.float64, device=x.device)
    kernel = torch.exp(-0.5 * (taps / sigma) ** 2).to(x.dtype)
    ones = torch.ones_like(x[:, :1])
    for dim in (3, 2):  # along the width, then the height
        shape = (1, 1, 1, -1) if dim == 3 else (1, 1, -1, 1)
        pad = (reach, reach, 0, 0) if dim == 3 else (0, 0, reach, reach)
        weights = kernel.view(shape)
        x = F.conv2d(F.pad(x, pad), weights.expand(x.shape[1], 1, *weights.shape[2:]), groups=x.shape[1])
        x = x / F.conv2d(F.pad(ones, pad), weights)
    return x


def gaussian_blur(rgb: Tensor, radius: float) -> Tensor:
    """(H, W, 3) uint8 -> (H, W, 3) uint8 blurred with a Gaussian of standard deviation `radius`:
    exactly below EXACT_BELOW, else three box blurs (windows clipped to the picture: no dark edges)."""
    x = rgb.permute(2, 0, 1)[None].float()
    if radius < EXACT_BELOW:
        x = _gaussian(x, radius)
    else:
        for width in box_sizes(radius):
            x = box_mean(x, (width - 1) // 2)
    return torch.floor(x[0].permute(1, 2, 0) + 0.5).clamp(0, 255).to(torch.uint8)


def cover(picture: Tensor, height: int, width: int) -> Tensor:
    """(h, w, 3 or 4) uint8 -> (height, width, 4) uint8: scaled to cover, the middle kept (module doc)."""
    h, w = picture.shape[:2]
    scale = max(width / w, height / h)
    rh, rw = max(height, round(h * scale)), max(width, round(w * scale))
    x = picture.permute(2, 0, 1)[None].float()
    if x.shape[1] == 3:
        x = torch.cat([x, torch.full_like(x[:, :1], 255.0)], 1)
    premultiplied = torch.cat([x[:, :3] * x[:, 3:] / 255.0, x[:, 3:]], 1)
    if (rh, rw) != (h, w):
        premultiplied = F.interpolate(premultiplied, size=(rh, rw), mode="bicubic", antialias=True, align_corners=False)
    top, left = (rh - height) // 2, (rw - width) // 2
    kept = premultiplied[0, :, top : top + height, left : left + width].clamp(0.0, 255.0)
    alpha = kept[3:]
    colour = torch.where(alpha > 0, kept[:3] * 255.0 / alpha.clamp(min=1e-6), 0.0)
    out = torch.cat([colour, alpha], 0).permute(1, 2, 0)
    return torch.floor(out + 0.5).clamp(0, 255).to(torch.uint8)


def _tensor(array: npt.NDArray[np.generic], device: torch.device) -> Tensor:
    """A host array on `device` (copied first if torch cannot share it: read-only or strided); a
    picture decoded there is there already (craftai_infer.pipelines.picture.device_pixels)."""
    on_device = device_pixels(array, device)
    if on_device is not None:
        return on_device
    return torch.from_numpy(np.require(array, requirements=("C", "W"))).to(device)


def _over_white(picture: Tensor) -> Tensor:
    """(H, W, 3) uint8: transparency composited over white (what a blur background is made from)."""
    if picture.shape[2] == 3:
        return picture
    white = torch.full_like(picture, 255)
    return composite(picture, white, opaque=True)


def background_layer(background: Background, picture: Tensor) -> Tensor:
    """The background at the picture's size, (H, W, 4) uint8 straight alpha, on the picture's device."""
    h, w = picture.shape[:2]
    if isinstance(background, Solid):
        return torch.tensor(background.rgba, dtype=torch.uint8, device=picture.device).expand(h, w, 4)
    if isinstance(background, Blur):
        blurred = gaussian_blur(_over_white(picture), background.radius)
        return torch.cat([blurred, torch.full_like(blurred[:, :, :1], 255)], 2)
    return cover(_tensor(background.picture, picture.device), h, w)


def render(
    picture: U8, matte: U8 | Tensor, spec: OutputsSpec, device: str, colours: U8 | Tensor | None = None
) -> Rendered:
    """Every output of `spec` for a picture (host array, the one picture type) and its (H, W) uint8 matte
    (a host array, or a tensor on `device`), computed on `device`, answered as host arrays.
    `colours`: the cutout's (H, W, 3) foreground colours when they are known already (a cutout
    session's: pipelines/cutout_merge.py), rather than estimated here."""
    with torch.inference_mode():
        return _render(picture, matte, spec, torch.device(device), colours)


def _render(
    picture: U8, matte: U8 | Tensor, spec: OutputsSpec, on: torch.device, colours: U8 | Tensor | None = None
) -> Rendered:
    m = matte.to(on) if isinstance(matte, Tensor) else _tensor(matte, on)
    if m.shape != picture.shape[:2]:
        raise ValueError(f"matte {tuple(m.shape)} and picture {picture.shape} do not fit")
    kinds = spec.kinds
    needs_picture = bool(kinds & {"cutout", "composite"}) or (picture.shape[2] == 4 and "mask" in kinds)
    pixels = _tensor(picture, on) if needs_picture else None
    alpha = combined_alpha(m, pixels) if pixels is not None else m
    made: dict[str, Tensor] = {}
    clock = _Clock(on)
    if "matte" in kinds:
        made["matte"] = m
    if "mask" in kinds:
        made["mask"] = clock.timed("mask", hard_mask(alpha, spec.threshold))
    if pixels is not None and kinds & {"cutout", "composite"}:
        if colours is not None and not spec.naive:
            known = colours.to(on) if isinstance(colours, Tensor) else _tensor(colours, on)
            layer = clock.timed("cutout", torch.cat([known, alpha[:, :, None]], dim=2))
        else:
            layer = clock.timed("cutout", cutout(pixels[:, :, :3], alpha, spec.naive))
        if "cutout" in kinds:
            made["cutout"] = layer
        if "composite" in kinds:
            background = spec.background
            made["composite"] = clock.timed(
                "composite", composite(layer, background_layer(background, pixels), background.opaque)
            )
    host = {name: t.cpu().numpy() for name, t in made.items()}
    if on.type == "cuda":
        clock.timed("host", None)
    return Rendered(**host, stages_ms=clock.stages_ms)


class _Clock:
    """Each output's time, from the end of the one before (on a GPU the device is waited for, so
    the time is the work's, not its launch's)."""

    def __init__(self, on: torch.device) -> None:
        self.on = on
        self.stages_ms: dict[str, float] = {}
        self._last = time.perf_counter()

    def timed(self, name: str, made: T) -> T:
        if self.on.type == "cuda":
            torch.cuda.synchronize(self.on)
        now = time.perf_counter()
        self.stages_ms[name] = (now - self._last) * 1000
        self._last = now
        return made
