"""Choose the guided-filter refinement's r and ε on a synthetic composite with a known matte.

A sharp ground-truth matte (smooth-noise blobs plus thin strands) composites two public-domain
photos (scikit-image's chelsea over coffee) at full resolution. The "network" is the true matte
reduced with Lanczos to the network size (1280 for a 4000 px picture; here the same ratio at a
smaller size), then, as in the pipeline, enlarged bilinearly and refined with the colour guided
filter. Errors are measured against the true matte on the band near its edges.

    .venv/bin/python tools/matte_refine_study.py [--side 1000]

`--birefnet` asks the BiRefNet_lite question instead: its network sees every picture at 1024²,
so for which long sides does refining the enlarged matte help? For each long side L the "network"
matte is the true one reduced to the ratio 1024/L with the pipeline's antialiased bilinear and
enlarged back bilinearly, then compared with and without the guided filter (r = ⌈3·L/1024⌉,
ε = 1e-4; no fringe shrink: the BiRefNet pipeline has none).

    .venv/bin/python tools/matte_refine_study.py --birefnet --noise 4
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from skimage import data

from craftai_infer.pipelines.guided_filter import guided_filter
from craftai_infer.pipelines.matte_inspyrenet import fringe_shrink
from craftai_infer.pipelines.matte_refine import refine_radius


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


def edge_band(truth: torch.Tensor) -> torch.Tensor:
    """Pixels within 4 px of an edge of the true matte."""
    return F.max_pool2d(truth, 9, 1, 4) - (-F.max_pool2d(-truth, 9, 1, 4)) > 0


def birefnet_study(rgb: np.ndarray, alpha: np.ndarray, sides: list[int], network: int = 1024) -> None:
    side = alpha.shape[0]
    guide = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255
    truth = torch.from_numpy(alpha)[None, None]
    band = edge_band(truth)
    print(f"picture side {side} standing for long side L; network {network}²; edge-band MAE")
    print(f"{'L':>6} {'scale':>6} {'r':>3} {'enlarged':>9} {'refined':>9} {'change':>8}")
    for long_side in sides:
        scale = network / long_side
        n = max(1, round(side * scale))
        small = F.interpolate(truth, size=(n, n), mode="bilinear", antialias=True, align_corners=False)
        up = F.interpolate(small, size=(side, side), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)
        r = refine_radius(scale)
        refined = guided_filter(guide, up, r, 1e-4).clamp(0, 1)
        before = (up - truth).abs()[band].mean().item()
        after = (refined - truth).abs()[band].mean().item()
        print(f"{long_side:>6} {scale:>6.3f} {r:>3} {before:>9.4f} {after:>9.4f} {after / before - 1:>+8.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=1280 / 4000)
    parser.add_argument("--noise", type=float, default=0.0, help="sensor noise std added to the picture, 0-255 units")
    parser.add_argument("--birefnet", action="store_true", help="the BiRefNet_lite question (see above)")
    parser.add_argument("--long-sides", default="1280,1536,2048,2560,3072,4000,5000")
    args = parser.parse_args()
    torch.set_num_threads(2)
    rgb, alpha = synthetic(args.side)
    if args.noise:
        noisy = rgb + np.random.default_rng(1).normal(0, args.noise, rgb.shape)
        rgb = np.clip(noisy + 0.5, 0, 255).astype(np.uint8)
    if args.birefnet:
        birefnet_study(rgb, alpha, [int(v) for v in args.long_sides.split(",")])
        return
    n = round(args.side * args.scale)
    small = np.asarray(Image.fromarray(alpha).resize((n, n), Image.Resampling.LANCZOS), np.float32).clip(0, 1)
    up = F.interpolate(torch.from_numpy(small)[None, None], size=(args.side, args.side), mode="bilinear")
    guide = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255
    truth = torch.from_numpy(alpha)[None, None]
    band = edge_band(truth)

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
