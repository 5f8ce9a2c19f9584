"""A matte fixed with regions SAM found from keep and remove prompts (docs/MATTE.md, "Fixing a
cutout"): pure functions, torch tensors in and out on one device.

With a the matte in [0, 1] (its 8-bit value / 255) and the prompts taken in order, prompt k's
region mask M_k (SAM's, at the picture's size) is first feathered along the picture's edges:

    R_k = clip(guided_filter(picture, M_k, r, eps), 0, 1), and 0 farther than 2r from M_k

(the guided filter of He et al.: the region's edge follows the picture's edges within r pixels),
then
    keep:    a = max(a, R_k)        remove:    a = min(a, 1 - R_k)

and the answer is round(255 a), half up. So outside every region's reach (its mask grown by 2r)
the matte keeps its byte exactly; a keep never lowers alpha, a remove never raises it; the answer
is a function of the prompt list (undo is the list without its last prompt).

The foreground colours of a cutout change only where alpha did: they are estimated again
(pipelines/foreground.py) on the changed pixels' bounding box grown by COLOUR_MARGIN, and written
at those pixels only; elsewhere the colours estimated at the open are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor

from craftai_infer.pipelines.matte_outputs import combined_alpha, cutout, render
from craftai_infer.pipelines.matte_spec import OutputsSpec, Rendered

__all__ = [
    "COLOUR_MARGIN",
    "EPS",
    "Region",
    "feather_radius",
    "feathered",
    "merged",
    "refined",
    "refreshed_colours",
]
U8 = npt.NDArray[np.uint8]

EPS = 1e-3  # the guided filter's regulariser, for a guide in [0, 1]: edges of contrast above ~0.03 are kept
COLOUR_MARGIN = 32  # pixels of context around the changed pixels for the colours' estimation


@dataclass(frozen=True)
class Region:
    """One prompt's region: whether it is kept (else removed), and SAM's mask of it, (H, W) bool."""

    keep: bool
    mask: Tensor


def feather_radius(height: int, width: int) -> int:
    """The guided filter's radius r: 1/256 of the picture's longer side, at least 2 pixels."""
    return max(2, round(max(height, width) / 256))


def _grown_box(mask: Tensor, grow: int) -> tuple[int, int, int, int] | None:
    """(top, bottom, left, right) of the mask's pixels grown by `grow`, within the picture; None if empty."""
    rows = torch.nonzero(mask.any(dim=1)).flatten()
    if rows.numel() == 0:
        return None
    cols = torch.nonzero(mask.any(dim=0)).flatten()
    height, width = mask.shape
    top, bottom = max(0, int(rows[0]) - grow), min(height, int(rows[-1]) + 1 + grow)
    left, right = max(0, int(cols[0]) - grow), min(width, int(cols[-1]) + 1 + grow)
    return top, bottom, left, right


def _box(x: Tensor, r: int) -> Tensor:
    """The mean of each (2r + 1)² window clipped to the picture, over (N, C, H, W): two 1-D average
    pools counting only the pixels inside. Each window is summed on its own (no running sums), so a
    crop answers exactly what the whole picture does wherever its windows lie inside the crop. On the
    CPU several planes are pooled channels-last (the same sums in the same order, vectorised across
    the planes: the same bits in less time), and answered in the usual layout."""
    k = 2 * r + 1
    last = x.device.type == "cpu" and x.shape[1] > 1
    if last:
        x = x.contiguous(memory_format=torch.channels_last)
    x = F.avg_pool2d(x, (1, k), stride=1, padding=(0, r), count_include_pad=False)
    x = F.avg_pool2d(x, (k, 1), stride=1, padding=(r, 0), count_include_pad=False)
    return x.contiguous() if last else x


def _guided(guide: Tensor, p: Tensor, r: int, eps: float) -> Tensor:
    """He et al.'s guided filter of p (1, 1, H, W) with a colour guide (1, 3, H, W) in [0, 1], in
    float32 (pipelines/guided_filter.py is the float64 one of the InSPyReNet pipeline, whose running
    sums make a crop answer other bits than the whole picture). The guide is centred on 0.5, a
    constant: the E[I Iᵀ] − μ μᵀ cancellation stays small, and the centre does not depend on the crop."""
    guide = guide - 0.5
    mu = _box(guide, r)
    p_mean = _box(p, r)
    cov = _box(guide * p, r) - mu * p_mean
    red, green, blue = guide[:, 0:1], guide[:, 1:2], guide[:, 2:3]
    mr, mg, mb = mu[:, 0:1], mu[:, 1:2], mu[:, 2:3]
    second = _box(torch.cat([red * red, red * green, red * blue, green * green, green * blue, blue * blue], 1), r)
    rr = second[:, 0:1] - mr * mr + eps
    rg = second[:, 1:2] - mr * mg
    rb = second[:, 2:3] - mr * mb
    gg = second[:, 3:4] - mg * mg + eps
    gb = second[:, 4:5] - mg * mb
    bb = second[:, 5:6] - mb * mb + eps
    del second
    # (Σ + εU)⁻¹ by cofactors (symmetric positive definite: det >= eps³ > 0)
    c_rr, c_rg, c_rb = gg * bb - gb * gb, rb * gb - rg * bb, rg * gb - rb * gg
    c_gg, c_gb, c_bb = rr * bb - rb * rb, rb * rg - rr * gb, rr * gg - rg * rg
    det = rr * c_rr + rg * c_rg + rb * c_rb
    del rr, rg, rb, gg, gb, bb
    cr, cg, cb = cov[:, 0:1], cov[:, 1:2], cov[:, 2:3]
    a = torch.cat(
        [c_rr * cr + c_rg * cg + c_rb * cb, c_rg * cr + c_gg * cg + c_gb * cb, c_rb * cr + c_gb * cg + c_bb * cb], 1
    )
    a /= det
    del c_rr, c_rg, c_rb, c_gg, c_gb, c_bb, det, cov
    b = p_mean - (a * mu).sum(dim=1, keepdim=True)
    ab = _box(torch.cat([a, b], dim=1), r)
    return (ab[:, 0:3] * guide).sum(dim=1, keepdim=True) + ab[:, 3:4]


def _reach(mask: Tensor, grow: int) -> Tensor:
    """(H, W) bool: the (H, W) bool mask grown by `grow` pixels in each direction (a square), as two 1-D pools."""
    k = 2 * grow + 1
    m = mask[None, None].to(torch.float32)
    m = F.max_pool2d(m, (1, k), stride=1, padding=(0, grow))
    return F.max_pool2d(m, (k, 1), stride=1, padding=(grow, 0))[0, 0] > 0


def feathered(rgb: Tensor, mask: Tensor, radius: int, eps: float = EPS) -> Tensor:
    """(H, W) float32 in [0, 1]: the (H, W) bool mask's edge moved onto the (H, W, 3) uint8 picture's
    edges by the guided filter, 0 farther than 2 * radius from the mask."""
    guide = rgb.permute(2, 0, 1)[None].to(torch.float32) / 255.0
    soft = _guided(guide, mask[None, None].to(torch.float32), radius, eps)[0, 0].clamp(0.0, 1.0)
    return torch.where(_reach(mask, 2 * radius), soft, torch.zeros_like(soft))


def merged(matte: Tensor, rgb: Tensor, regions: Sequence[Region], radius: int, eps: float = EPS) -> Tensor:
    """(H, W) uint8: the (H, W) uint8 matte with each region applied in order (the module's rule).
    Each region is filtered on its mask's box grown by 4 * radius (the filter's reach from the
    mask's reach), which answers what the whole picture would to the bit (`_box`, `_guided`), at
    the cost of the region's size."""
    alpha = matte.to(torch.float32) / 255.0
    for region in regions:
        box = _grown_box(region.mask, 4 * radius)
        if box is None:
            continue
        top, bottom, left, right = box
        soft = feathered(rgb[top:bottom, left:right], region.mask[top:bottom, left:right], radius, eps)
        inside = alpha[top:bottom, left:right]
        if region.keep:
            alpha[top:bottom, left:right] = torch.maximum(inside, soft)
        else:
            alpha[top:bottom, left:right] = torch.minimum(inside, 1.0 - soft)
    return torch.floor(alpha * 255.0 + 0.5).clamp(0, 255).to(torch.uint8)


def refreshed_colours(rgb: Tensor, alpha: Tensor, colours: Tensor, changed: Tensor) -> Tensor:
    """(H, W, 3) uint8: `colours` (the foreground estimated for the old alpha) with the pixels of
    `changed` (H, W) bool estimated again for `alpha` (H, W) uint8, on their box grown by COLOUR_MARGIN."""
    box = _grown_box(changed, COLOUR_MARGIN)
    if box is None:
        return colours
    top, bottom, left, right = box
    estimated = cutout(rgb[top:bottom, left:right], alpha[top:bottom, left:right])[:, :, :3]
    band = changed[top:bottom, left:right, None]
    fresh = colours.clone()
    fresh[top:bottom, left:right] = torch.where(band, estimated, colours[top:bottom, left:right])
    return fresh


def refined(
    picture: U8,
    matte: U8,
    colours: U8 | None,
    spec: OutputsSpec,
    regions: Sequence[tuple[bool, npt.NDArray[np.bool_]]],
    *,
    device: str,
) -> tuple[Rendered, int]:
    """A cutout session's answer: the outputs of `spec` (pipelines/matte_outputs.py) for the host
    picture and its matte with the regions (keep?, (H, W) bool mask) merged in order, the cutout's
    `colours` estimated again where alpha changed (None: estimated whole, or none needed); and how
    many pixels' alpha changed. Computed on `device`."""
    on = torch.device(device)

    def tensor(array: npt.NDArray[np.generic]) -> Tensor:  # a read-only array is copied first: torch writes through
        return torch.from_numpy(np.require(array, requirements="W")).to(on)

    with torch.inference_mode():
        pixels = tensor(picture)
        rgb = pixels[:, :, :3]
        before = tensor(matte)
        asked = [Region(keep, tensor(mask)) for keep, mask in regions]
        after = merged(before, rgb, asked, feather_radius(*before.shape))
        changed = after != before
        fresh = None
        if colours is not None:
            fresh = refreshed_colours(rgb, combined_alpha(after, pixels), tensor(colours), changed)
        count = int(changed.sum())
    return render(picture, after, spec, device, colours=fresh), count
