"""rembg's Swin-L BiRefNet recipes on torch (birefnet-general, birefnet-portrait: Swin-L at 1024², rembg's
steps around it) on the GPU machine, against nobg's Swin-L BiRefNet from the same fp16 file, one
run. Prints a table, writes birefnet_general_check.json.

    python3 -m tools.gpu.birefnet_general_check [--out DIR] [--reps 10]     # from the repository root

Weights: a random Swin-L network, its BatchNorms calibrated on astronaut.png at 1024², stored as the
published file is (fp16 floats; the same work per picture as the real weights). Read channel-major,
nobg's only order (the recipes' files are patch-major: the same work, the injection inputs reordered).
1. the network alone at 1024² (median ms, device synchronised, after warm-up): nobg fp32 (TF32 off,
   as the service runs fp32) and ours as the route runs it (BatchNorm folded, one CUDA graph, fp32),
   one picture and two a call, with the logits' difference from nobg's;
2. the route's pipeline in-process (host uint8 picture in, host uint8 matte out: rembg's Lanczos
   resizes and min-max on the CPU around the network) at 1024x1024 and 4000x3000.
rembg's own session cannot run beside it there: onnxruntime's CUDA build is not on the machine.
"""

from __future__ import annotations

from pathlib import Path

import torch

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import photo_input, swin_l_prepared
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.birefnet_rembg_torch import BirefnetRembgTorch
from craftai_models.birefnet import PatchOrder
from tools.bench import harness
from tools.gpu.birefnet_check import matte_errors
from tools.gpu.birefnet_hr_check import arguments, forward_rows, on_cuda, pipeline_times, written

REPO = Path(__file__).resolve().parents[2]
SIDE = 1024


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__)
    device, report = on_cuda(SIDE)
    rows: list[tuple[str, str]] = []
    with harness.scratch("birefnet-general-") as folder:
        swin_l_prepared(folder, device, SIDE, PatchOrder.CHANNEL_MAJOR)
        route = BirefnetRembgTorch(RouteFiles({}, folder, 0, gpu_precision="auto"), "cuda")
        route.warm_up(lambda _message: None)
        reference = birefnet_reference.reference_from_origin(folder, swin_l=True).to(device)
        x = photo_input(SIDE).to(device)
        two = torch.cat([x, x])
        forward: dict[str, float] = {}
        with torch.inference_mode():
            theirs = reference(x)["logits"].float()
            ours = route.forward(x).float()
            errors = matte_errors(ours, theirs)
            forward["nobg fp32, one picture"] = harness.timed_on(
                lambda: reference(x)["logits"], args.reps, args.warmup, device
            )
            forward["ours as the route runs it, fp32, one picture"] = harness.timed_on(
                lambda: route.forward(x), args.reps, args.warmup, device
            )
            forward["ours as the route runs it, fp32, two pictures a call (per picture)"] = (
                harness.timed_on(lambda: route.forward(two), args.reps, args.warmup, device) / 2
            )
        rows += forward_rows(SIDE, forward, errors)
        pipeline = pipeline_times(
            lambda p: [m.cpu().numpy() if isinstance(m, torch.Tensor) else m for m in route.matte([p])],
            ((1024, 1024), (4000, 3000)),
            args,
            rows,
        )
    report.update(forward_ms=forward, matte_errors=errors, pipeline_ms=pipeline)
    return written(args.out, "birefnet_general_check.json", report, rows)


if __name__ == "__main__":
    raise SystemExit(main())
