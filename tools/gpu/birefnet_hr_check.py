"""BiRefNet_HR (Swin-L at 2048²) on the GPU machine: birefnet-hr's torch route against nobg's Swin-L
BiRefNet from the same fp16 file, one run. Prints a table, writes birefnet_hr_check.json.

    python3 -m tools.gpu.birefnet_hr_check [--out DIR] [--reps 10]     # from the repository root

Weights: a random Swin-L network, its BatchNorms calibrated on astronaut.png at 2048², stored as the
published file is (fp16 floats: the published file cannot be had here; the same work per picture).
1. the network alone at 2048² (median ms, device synchronised, after warm-up): nobg fp32 (TF32 off,
   as the service runs fp32) and ours as the route runs it (BatchNorm folded, channels-last, one CUDA
   graph, fp32), with the matte's difference from nobg's;
2. the route's pipeline in-process (host uint8 picture in, host uint8 matte out) at 2048x1536 and
   4000x3000.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import photo_input, swin_l_prepared
from craftai_infer.engines.cuda_graphs import GraphCache
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.birefnet_torch import BirefnetTorch
from craftai_models.birefnet import (
    PREPARED_WEIGHTS,
    Architecture,
    PatchOrder,
    fold_batchnorm,
    load_birefnet,
)
from tools.bench import harness
from tools.gpu.birefnet_check import matte_errors, photo

REPO = Path(__file__).resolve().parents[2]
SIDE = 2048


def arguments(argv: list[str] | None, doc: str | None) -> argparse.Namespace:
    """The Swin-L checks' command line (this one's and birefnet_general_check's)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "gpu")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def on_cuda(side: int) -> tuple[torch.device, dict[str, Any]]:
    """The GPU with TF32 off (the service runs fp32 as fp32), and the report's header."""
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return device, {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "side": side}


def written(out: Path, name: str, report: dict[str, Any], rows: list[tuple[str, str]]) -> int:
    """Print the table, write the report as `name`."""
    width = max(len(k) for k, _ in rows)
    print(f"torch {torch.__version__}, {report['device']}")
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    (out / name).write_text(json.dumps(report, indent=2))
    return 0


def forward_rows(side: int, forward: dict[str, float], errors: dict[str, float]) -> list[tuple[str, str]]:
    """The table's rows for the forwards timed and the matte's difference from nobg's."""
    rows = [(f"forward {side}² {name}", f"{ms:8.1f} ms") for name, ms in forward.items()]
    rows.append(("ours' matte vs nobg's", error_words(errors)))
    return rows


def error_words(errors: dict[str, float]) -> str:
    """birefnet_check.matte_errors as a table cell."""
    share, iou = errors["share_moved_over_1_of_255"], errors["iou"]
    return f"max {errors['max_abs']:.2e}, >1/255 {share:.2%}, IoU {iou:.5f}"


def pipeline_times(
    matte: Callable[[np.ndarray], Sequence[object]],
    sizes: tuple[tuple[int, int], ...],
    args: argparse.Namespace,
    rows: list[tuple[str, str]],
) -> dict[str, float]:
    """The route's pipeline in process (host uint8 picture in, host matte out) at each size; a row each."""
    times: dict[str, float] = {}
    for w, h in sizes:
        picture = photo((w, h))

        def matte_one(picture: np.ndarray = picture) -> Sequence[object]:
            return matte(picture)

        times[f"{w}x{h}"] = harness.timed_on(matte_one, args.reps, 1, torch.device("cuda"))
        rows.append((f"pipeline {w}x{h} (uint8 in, uint8 matte out)", f"{times[f'{w}x{h}']:.1f} ms"))
    return times


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__)
    device, report = on_cuda(SIDE)
    rows: list[tuple[str, str]] = []
    with harness.scratch("birefnet-hr-") as folder:
        swin_l_prepared(folder, device, SIDE)
        route = BirefnetTorch(RouteFiles({}, folder, 0, gpu_precision="auto"), "cuda")
        route.warm_up(lambda _message: None)
        reference = birefnet_reference.reference_from_origin(folder, swin_l=True).to(device)
        x = photo_input(SIDE).to(device)
        forward: dict[str, float] = {}
        with torch.inference_mode():
            theirs = reference(x)["logits"].float()
            ours = route.forward(x).float()
            errors = matte_errors(ours, theirs)
            forward["nobg fp32"] = harness.timed_on(lambda: reference(x)["logits"], args.reps, args.warmup, device)
            forward["ours as the route runs it, fp32"] = harness.timed_on(
                lambda: route.forward(x), args.reps, args.warmup, device
            )
            plain = fold_batchnorm(
                load_birefnet(
                    folder / PREPARED_WEIGHTS, device, PatchOrder.CHANNEL_MAJOR, architecture=Architecture.SWIN_L
                )
            )
            forward["ours folded, contiguous, eager, fp32"] = harness.timed_on(
                lambda: plain(x), args.reps, args.warmup, device
            )
            graphs = GraphCache(lambda t: (plain(t),), device, capacity=1)
            forward["ours folded, contiguous, CUDA graph, fp32"] = harness.timed_on(
                lambda: graphs.run(1, [x]), args.reps, args.warmup, device
            )
        rows += forward_rows(SIDE, forward, errors)
        pipeline = pipeline_times(
            lambda p: [m.cpu().numpy() for m in route.matte([p])], ((2048, 1536), (4000, 3000)), args, rows
        )
    report.update(forward_ms=forward, matte_errors=errors, pipeline_ms=pipeline)
    return written(args.out, "birefnet_hr_check.json", report, rows)


if __name__ == "__main__":
    raise SystemExit(main())
