"""birefnet-dynamic (BiRefNet_dynamic: Swin-L at each picture's own size) on the GPU machine, beside
nobg's Swin-L BiRefNet from the same fp16 file at the same input sizes, one run. Prints a table,
writes birefnet_dynamic_check.json.

    python3 -m tools.gpu.birefnet_dynamic_check [--out DIR] [--reps 10]     # from the repository root

Weights: a random Swin-L network, its BatchNorms calibrated on astronaut.png at 1024², stored as the
published file is (fp16 floats; the same work per picture as the real weights), channel-major.
1. the network alone at each input size (median ms, device synchronised, after warm-up): nobg fp32
   (TF32 off, as the service runs fp32) and ours as the route runs it (BatchNorm folded, eager: the
   input's shape follows the picture, so no CUDA graph), with the logits' difference from nobg's;
2. the route's pipeline in-process (host uint8 picture in, the matte on the device: Pillow's bicubic
   to the input size on the CPU, the rest on the GPU) at 1024x768, 2048x1536 and 4000x3000 (input
   2304x1728).
"""

from __future__ import annotations

from pathlib import Path

import torch

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import photo_input, swin_l_prepared
from craftai_infer.pipelines.matte_birefnet_dynamic import input_size
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.birefnet_dynamic_torch import BirefnetDynamicTorch
from craftai_models.birefnet import PatchOrder
from tools.bench import harness
from tools.gpu.birefnet_check import matte_errors
from tools.gpu.birefnet_hr_check import arguments, error_words, on_cuda, pipeline_times, written

REPO = Path(__file__).resolve().parents[2]
SIDE = 1024
PICTURES = ((1024, 768), (2048, 1536), (4000, 3000))


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__)
    device, report = on_cuda(SIDE)
    rows: list[tuple[str, str]] = []
    forward: dict[str, float] = {}
    errors: dict[str, dict[str, float]] = {}
    with harness.scratch("birefnet-dynamic-") as folder:
        swin_l_prepared(folder, device, SIDE, PatchOrder.CHANNEL_MAJOR)
        route = BirefnetDynamicTorch(RouteFiles({}, folder, 0, gpu_precision="auto"), "cuda")
        reference = birefnet_reference.reference_from_origin(folder, swin_l=True).to(device)
        square = photo_input(2304)
        for w, h in PICTURES:
            ih, iw = input_size(h, w)
            x = torch.nn.functional.interpolate(square, size=(ih, iw), mode="bilinear").to(device)

            def nobg(x: torch.Tensor = x, network: torch.nn.Module = reference) -> torch.Tensor:
                logits: torch.Tensor = network(x)["logits"]
                return logits

            def network(x: torch.Tensor = x) -> torch.Tensor:
                logits: torch.Tensor = route.network(x)
                return logits

            with torch.inference_mode():
                errors[f"{iw}x{ih}"] = matte_errors(network().float(), nobg().float())
                theirs = harness.timed_on(nobg, args.reps, args.warmup, device)
                ours = harness.timed_on(network, args.reps, args.warmup, device)
            forward[f"nobg fp32 {iw}x{ih}"], forward[f"ours fp32 {iw}x{ih}"] = theirs, ours
            rows.append((f"network at {iw}x{ih}: ours / nobg", f"{ours:.1f} / {theirs:.1f} ms ({theirs / ours:.2f}x)"))
            rows.append((f"network at {iw}x{ih}: matte vs nobg's", error_words(errors[f"{iw}x{ih}"])))
        del reference
        torch.cuda.empty_cache()
        pipeline = pipeline_times(lambda p: route.matte([p]), PICTURES, args, rows)
        rows.append(("peak GPU memory", f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"))
    report.update(forward_ms=forward, matte_errors=errors, pipeline_ms=pipeline)
    return written(args.out, "birefnet_dynamic_check.json", report, rows)


if __name__ == "__main__":
    raise SystemExit(main())
