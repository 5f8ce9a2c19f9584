"""InSPyReNet Swin-B on the GPU machine: parity with the reference network, autocast tolerance, timings.

Run from the repository root, with the packages importable (the dev environment, or run_all.sh's
PYTHONPATH); nothing is downloaded:

    python3 -m tools.gpu.inspyrenet_check                          # CUDA, 1024² (base_size 1024²)
    python3 -m tools.gpu.inspyrenet_check --device cpu --size 64   # quick CPU smoke run

What it does, with random weights (every parameter and buffer, BN statistics measured on the input;
craftai_dev.inspyrenet_reference):
1. parity at --size in fp32 (TF32 off): ours vs transparent-background's network, relative error
   max|ours − ref| / max|ref| of the logits d0 and of the matte;
2. autocast fp16 and bf16 (ours and the reference) against the fp32 reference: max and mean
   absolute matte error, and the share of pixels whose 8-bit value moves by more than 1;
3. median forward time (CUDA events, after warm-up) of ours and the reference at --size and at
   1.25×--size (1280 for 1024: the network side of the > 1280 px pipeline path);
4. the whole pipeline (craftai_infer.pipelines.matte_inspyrenet) on a 4000×3000 picture.

The reference: transparent_background 1.3.4 from site-packages, or --reference-wheel PATH (a wheel
file is imported in place). On the GPU machine (KINDS.md, "Python packages already there"):
timm (with torchvision) and opencv-python-headless are there, kornia and transparent-background
are not. kornia is only needed by the reference's Transition (the LR/HR branch that threshold=None
never runs), so a stand-in that raises is used when it is missing; carry the
transparent-background wheel (pip download transparent-background==1.3.4 --no-deps -d .whl).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from craftai_dev.inspyrenet_reference import (
    build_reference,
    calibrate_batchnorm,
    randomised_state_dict,
)
from craftai_infer.pipelines.matte_inspyrenet import (
    MatteSettings,
    matte_inspyrenet,
    matte_inspyrenet_float,
)
from craftai_infer.pipelines.matte_refine import edge_tiles, refine_radius
from craftai_models.inspyrenet import InSPyReNet, inspyrenet_swin_b
from tools.gpu.timing import times_ms


def _bind(net: Callable[[Tensor], Tensor], x: Tensor) -> Callable[[], object]:
    return lambda: net(x)


def relative(a: Tensor, b: Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


def disc_picture(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
    rgb[(yy - h / 2) ** 2 + (xx - w / 2) ** 2 < (0.3 * min(h, w)) ** 2] = [230, 200, 180]
    return rgb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", type=int, default=1024, help="square input side; base_size follows it")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--reference-wheel", type=Path, default=None)
    parser.add_argument(
        "--pipeline",
        default=None,
        help="WxH of the pipeline picture, or 'none' (default 4000x3000; on the CPU 320x240 with"
        " the network side scaled to --size, so that the reduce/enlarge/refine path runs)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    settings = MatteSettings()
    if device.type == "cpu":
        args.warmup, args.reps = 0, 1
        if args.pipeline is None:
            args.pipeline, settings = "320x240", MatteSettings(max_side=args.size)
    args.pipeline = args.pipeline or "4000x3000"
    base = (args.size, args.size)
    print(
        f"torch {torch.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f", input {args.size}², base_size {base}"
    )

    x = torch.randn(1, 3, *base, generator=torch.Generator().manual_seed(1))
    reference = build_reference(base, wheel=args.reference_wheel, allow_missing_kornia=True)
    reference.load_state_dict(randomised_state_dict(reference), strict=True)
    reference = reference.to(device)
    state = calibrate_batchnorm(reference, x.to(device))
    reference.load_state_dict(state, strict=True)
    ours: InSPyReNet = inspyrenet_swin_b(base).eval()
    ours.load_state_dict(state, strict=True)
    ours = ours.to(device)
    xd = x.to(device)

    rows: list[tuple[str, str]] = []
    with torch.inference_mode():
        ref_d0: list[Tensor] = []
        pyramid: Any = reference.image_pyramid
        original = pyramid.reconstruct

        def recording(a: Tensor, lap: Tensor) -> Tensor:
            out: Tensor = original(a, lap)
            ref_d0[:] = [out]
            return out

        pyramid.reconstruct = recording
        ref_pred = reference(xd)
        pyramid.reconstruct = original
        stages = ours.stages(xd)
        rows.append(("fp32 parity: logits d0, rel. error", f"{relative(stages.saliency[3], ref_d0[0]):.2e}"))
        rows.append(("fp32 parity: matte, rel. error", f"{relative(stages.pred, ref_pred):.2e}"))
        rows.append(("fp32 matte std (non-degenerate check)", f"{float(ref_pred.std()):.3f}"))

        for dtype in (torch.float16, torch.bfloat16):
            for name, net in (("ours", ours), ("reference", reference)):
                try:
                    with torch.autocast(device.type, dtype=dtype):
                        pred = net(xd).float()
                except RuntimeError as exc:  # e.g. a CPU kernel without fp16
                    rows.append((f"autocast {str(dtype)[6:]} {name}", f"failed: {str(exc)[:60]}"))
                    continue
                err = (pred - ref_pred).abs()
                moved = ((pred * 255).round() - (ref_pred * 255).round()).abs() > 1
                share = float(moved.float().mean())
                rows.append(
                    (
                        f"autocast {str(dtype)[6:]} {name} vs fp32 ref",
                        f"max {float(err.max()):.3e}  mean {float(err.mean()):.3e}  >1/255: {share:.2%}",
                    )
                )

        for side in (args.size, args.size * 5 // 4):
            xs = torch.randn(1, 3, side, side, device=device)
            for name, net in (("ours", ours), ("reference", reference)):
                forward = _bind(net, xs)
                ms = statistics.median(times_ms(forward, device, reps=args.reps, warmup=args.warmup))
                rows.append((f"forward {side}² fp32 {name}", f"{ms:.1f} ms"))
                if device.type == "cuda":
                    with torch.autocast("cuda", dtype=torch.float16):
                        ms = statistics.median(times_ms(forward, device, reps=args.reps, warmup=args.warmup))
                    rows.append((f"forward {side}² fp16 autocast {name}", f"{ms:.1f} ms"))
            if device.type == "cuda":
                peak = torch.cuda.max_memory_allocated(device) / 2**30
                rows.append((f"peak memory after {side}² runs", f"{peak:.2f} GiB"))

    if args.pipeline != "none":
        w, h = (int(v) for v in args.pipeline.lower().split("x"))
        rgb = disc_picture(h, w)
        alpha = matte_inspyrenet_float(rgb, ours, device=device, settings=settings)
        scale = settings.max_side / max(h, w)
        tiles = edge_tiles(alpha[None, None], settings.tile, 2 * refine_radius(scale), settings.edge_margin)
        total = -(-h // settings.tile) * -(-w // settings.tile)
        for label, autocast in (("fp32", None), ("fp16 autocast", torch.float16 if device.type == "cuda" else None)):
            if autocast is None and label != "fp32":
                continue

            def run_pipeline(a: torch.dtype | None = autocast) -> object:
                return matte_inspyrenet(rgb, ours, device=device, autocast=a, settings=settings)

            ms = statistics.median(
                times_ms(run_pipeline, device, reps=max(1, args.reps // 2), warmup=min(args.warmup, 1))
            )
            rows.append((f"pipeline {w}×{h} {label} (uint8 matte, host to host)", f"{ms:.1f} ms"))
        rows.append(
            (
                f"pipeline refined tiles (random weights, network side {settings.max_side})",
                f"{len(tiles)} of {total}, r={refine_radius(scale)}"
                if scale < settings.refine_below_scale
                else "none (not below half scale)",
            )
        )

    width = max(len(k) for k, _ in rows)
    print("-" * (width + 40))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
