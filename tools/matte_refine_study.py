"""Choose the guided-filter refinement's r and ε on a synthetic composite with a known matte.

A sharp ground-truth matte (smooth-noise blobs plus thin strands) composites two public-domain
photos (scikit-image's chelsea over coffee) at full resolution. The "network" is the true matte
reduced with Lanczos to the network size (1280 for a 4000 px picture; here the same ratio at a
smaller size), then, as in the pipeline, enlarged bilinearly and refined with the colour guided
filter. Errors are measured against the true matte on the band near its edges.

    .venv/bin/python tools/matte_refine_study.py [--side 1000]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from skimage import data

from craftai_infer.pipelines.guided_filter import guided_filter
from craftai_infer.pipelines.matte_inspyrenet import fringe_shrink, refine_radius


def synthetic(side: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(rgb uint8 (side, side, 3), alpha float32 (side, side)) with a known sharp matte."""
    rng = np.random.default_rng(seed)
    cat: np.ndarray = data.chelsea()  # type: ignore[no-untyped-call]
    cup: np.ndarray = data.coffee()  # type: ignore[no-untyped-call]
    fg = np.asarray(Image.fromarray(cat).resize((side, side), Image.Resampling.LANCZOS), np.float32)
    bg = np.asarray(Image.fromarray(cup).resize((side, side), Image.Resampling.LANCZOS), np.float32)
    noise = torch.from_numpy(rng.standard_normal((1, 1, side // 40, side // 40)).astype(np.float32))
    smooth = F.interpolate(noise, size=(side, side), mode="bicubic", align_corners=False)[0, 0].numpy()
    alpha = (smooth > 0.3).astype(np.float32)
    # Thin strands, 1-2 px wide, as hair would be.
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    for _ in range(12):
        x0, slope, width = rng.uniform(0, side), rng.uniform(-0.5, 0.5), rng.uniform(0.7, 1.5)
        dist = np.abs(xx - (x0 + slope * yy))
        alpha = np.maximum(alpha, np.clip(width - dist, 0, 1) * (yy < rng.uniform(0.3, 1.0) * side))
    rgb = alpha[..., None] * fg + (1 - alpha[..., None]) * bg
    return np.clip(rgb + 0.5, 0, 255).astype(np.uint8), alpha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=1280 / 4000)
    parser.add_argument("--noise", type=float, default=0.0, help="sensor noise std added to the picture, 0-255 units")
    args = parser.parse_args()
    torch.set_num_threads(2)
    rgb, alpha = synthetic(args.side)
    if args.noise:
        noisy = rgb + np.random.default_rng(1).normal(0, args.noise, rgb.shape)
        rgb = np.clip(noisy + 0.5, 0, 255).astype(np.uint8)
    n = round(args.side * args.scale)
    small = np.asarray(Image.fromarray(alpha).resize((n, n), Image.Resampling.LANCZOS), np.float32).clip(0, 1)
    up = F.interpolate(torch.from_numpy(small)[None, None], size=(args.side, args.side), mode="bilinear")
    guide = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255
    truth = torch.from_numpy(alpha)[None, None]
    band = F.max_pool2d(truth, 9, 1, 4) - (-F.max_pool2d(-truth, 9, 1, 4)) > 0  # within 4 px of an edge

    def report(name: str, q: torch.Tensor) -> None:
        q = q.clamp(0, 1)
        err = (q - truth).abs()[band].mean().item()
        shrunk = (fringe_shrink(q) - truth).abs()[band].mean().item()
        print(f"{name:28s} edge-band MAE {err:.4f}   after fringe shrink {shrunk:.4f}")

    print(
        f"side {args.side}, network side {n} (scale {args.scale:.3f}), noise {args.noise}; "
        f"pipeline radius {refine_radius(args.scale)}"
    )
    report("enlarged, no refinement", up)
    for r in (2, 4, 7, 10, 16, 24):
        for eps in (1e-5, 1e-4, 1e-3, 1e-2):
            report(f"r={r:2d} eps={eps:g}", guided_filter(guide, up, r, eps))


if __name__ == "__main__":
    main()
