"""BiRefNet_lite on the GPU machine: this project's network against nobg's, same weights, one run;
then the whole pipeline in-process and through gRPC. Prints a table, writes birefnet_check.json.

    python3 -m tools.gpu.birefnet_check [--out DIR] [--reps 20]     # from the repository root
    python3 -m tools.gpu.birefnet_check --device cpu --size 256 --reps 1 --quick --no-grpc   # CPU smoke run
    (below 512² nobg's backbone is not the original Swin: its accuracy rows mean little there)

Weights: the calibrated random checkpoint of craftai_dev.birefnet_fixture (made on first use,
cached under .cache/fixtures/; the published file cannot be had here). nobg 0.3.1 is imported as
craftai_dev.birefnet_reference does, with torchvision's real deform_conv2d where it imports
(the GPU machine has torchvision; carry the nobg wheel in .whl/: pip download nobg==0.3.1 --no-deps).

1. accuracy at --size, against nobg in fp32 (TF32 off): the logits' max |d| / max |ref| of ours
   (nobg's patch order), of ours in the trained order against nobg running the original split, and
   of every timed variant's matte (sigmoid) against nobg's fp32 one: max |d|, share of pixels whose
   8-bit value moves by more than 1, IoU of the >0.5 masks;
2. the network alone (median ms, device synchronised, after warm-up): nobg fp32 / fp16 / bf16
   autocast; ours as loaded (fp32, bf16); ours as the route runs it (BatchNorm folded,
   channels-last, CUDA graph) in fp32, fp16 and bf16;
3. deform_conv2d alone, ours against torchvision's, on the largest call of the network (7×7, 64 to
   256 channels at 256²);
4. the pipeline in-process (host uint8 picture in, host uint8 matte out), the route's default
   precision: 1024x768 and 4000x3000;
5. through gRPC (`craftai serve` on loopback, the fixture pinned by a catalogue): the Matte round
   trip of a 1024x768 and a 4000x3000 JPEG, p50/p90, and the server's stage timings; the matte
   alone, then the matte and the cutout (foreground colours estimated on the GPU beside the matte).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import checkpoints, photo_input, prepared_folder
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.birefnet_torch import BirefnetTorch
from craftai_models.birefnet import TRAINED_ORDER, PatchOrder, load_birefnet
from craftai_models.deform_conv import deform_conv2d
from tools.bench import harness

REPO = Path(__file__).resolve().parents[2]

DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def relative(a: Tensor, b: Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


def matte_errors(logits: Tensor, reference: Tensor) -> dict[str, float]:
    ours, theirs = torch.sigmoid(logits.float()), torch.sigmoid(reference.float())
    moved = ((ours * 255).round() - (theirs * 255).round()).abs() > 1
    a, b = ours > 0.5, theirs > 0.5
    return {
        "max_abs": float((ours - theirs).abs().max()),
        "share_moved_over_1_of_255": float(moved.float().mean()),
        "iou": float((a & b).sum() / (a | b).sum().clamp_min(1)),
    }


def timed(fn: Callable[[], Any], device: torch.device, reps: int, warmup: int) -> float:
    return harness.timed_on(fn, reps, warmup, device)


def autocast_call(net: Callable[[Tensor], Any], x: Tensor, dtype: torch.dtype | None) -> Callable[[], Any]:
    def run() -> Any:
        with torch.inference_mode(), torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
            return net(x)

    return run


def route(device: str, precision: str) -> BirefnetTorch:
    made = checkpoints()["random"]
    files = RouteFiles({}, prepared_folder(made), 0, gpu_precision=precision)  # type: ignore[arg-type]
    built = BirefnetTorch(files, device)
    built.warm_up(lambda _message: None)
    return built


def photo(size: tuple[int, int]) -> np.ndarray:
    from craftai_dev.samples import photos

    return np.asarray(Image.open(photos()["astronaut.png"]).convert("RGB").resize(size, Image.Resampling.BICUBIC))


def jpeg(size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.fromarray(photo(size)).save(out, format="JPEG", quality=92)
    return out.getvalue()


def grpc_round_trips(sizes: list[tuple[int, int]], reps: int) -> dict[str, Any]:
    from craftai import AiClient

    made = checkpoints()["random"]
    result: dict[str, Any] = {}
    with harness.scratch("birefnet-grpc-") as work:
        files = work / "files"
        files.mkdir()
        (files / "model.safetensors").symlink_to(made.path)
        with harness.files_on_loopback(files) as url:
            pin = {"size": made.pin.size, "sha256": made.pin.sha256, "url": f"{url}/model.safetensors"}
            recipes = harness.pinned_catalogue(work / "recipes.toml", {"birefnet-lite": {"weights": pin}})
            with (
                harness.serve(work, {"CRAFTAI_RECIPES": str(recipes)}) as address,
                AiClient(app_id="bench", target=address) as ai,
            ):
                list(ai.setup("image.matte", "birefnet-lite", "torch"))
                for size in sizes:
                    picture = jpeg(size)
                    for outputs in ("matte", "matte,cutout"):
                        call = functools.partial(
                            ai.remove_background, picture, outputs=outputs, recipe="birefnet-lite", engine="torch"
                        )
                        samples = harness.timed_ms(call, reps, 3)
                        answer = call()
                        result[f"{size[0]}x{size[1]} {outputs}"] = {
                            "round_trip_ms": harness.percentiles(samples),
                            "server_stages_ms": dict(answer.timing_ms),
                            "device": answer.device,
                        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--pictures", default="1024x768,4000x3000")
    parser.add_argument("--no-grpc", action="store_true")
    parser.add_argument("--quick", action="store_true", help="fp32 variants only (a smoke run)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "gpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    if device.type == "cpu":
        args.warmup = 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = []
    report: dict[str, Any] = {"device": str(device), "torch": torch.__version__, "size": args.size}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)

    made = checkpoints()["random"]
    with harness.scratch("nobg-origin-") as origin:
        (origin / "model.safetensors").symlink_to(made.path)
        reference = birefnet_reference.reference_from_origin(origin).to(device)
    report["nobg_deform_conv"] = (
        "stand-in (craftai_dev)" if birefnet_reference.deform_conv_is_stood_in() else "torchvision"
    )
    x = photo_input(args.size).to(device)
    ours = load_birefnet(made.path, device, PatchOrder.CHANNEL_MAJOR)
    trained = load_birefnet(made.path, device, TRAINED_ORDER)

    # 1. accuracy
    accuracy: dict[str, Any] = {}
    with torch.inference_mode():
        theirs = reference(x)["logits"].float()
        accuracy["ours (nobg's order) fp32 logits, rel."] = relative(ours(x), theirs)
        restore = birefnet_reference.use_patch_order(birefnet_reference.get_patches_batch)
        try:
            theirs_trained = reference(x)["logits"].float()
        finally:
            restore()
        accuracy["ours (trained order) vs nobg with the original split, fp32 logits, rel."] = relative(
            trained(x), theirs_trained
        )
    for key, value in accuracy.items():
        rows.append((key, f"{value:.2e}"))

    # 2. the network alone
    timings: dict[str, float] = {}
    variants: dict[str, Callable[[], Any]] = {}
    precisions = ["fp32"] if args.quick else list(DTYPES)
    for name in precisions:
        variants[f"nobg {name}"] = autocast_call(lambda t: reference(t)["logits"], x, DTYPES[name])
    for name in [p for p in precisions if p != "fp16"]:
        variants[f"ours as loaded {name}"] = autocast_call(trained, x, DTYPES[name])
    routes = {name: route(str(device), name) for name in precisions} if device.type == "cuda" else {}
    for name, built in routes.items():
        variants[f"ours as the route runs it {name}"] = autocast_call(built.forward, x, built.autocast)
    errors: dict[str, Any] = {}
    for name, run in variants.items():
        ms = timed(run, device, args.reps, args.warmup)
        timings[name] = ms
        with torch.inference_mode():
            logits = run().float()
        reference_logits = theirs_trained if name.startswith("ours") else theirs
        errors[name] = matte_errors(logits, reference_logits)
        e = errors[name]
        rows.append(
            (
                f"forward {args.size}² {name}",
                f"{ms:8.2f} ms   matte vs nobg fp32: max {e['max_abs']:.3e}, "
                f">1/255 {e['share_moved_over_1_of_255']:.2%}, IoU {e['iou']:.5f}",
            )
        )
    report.update(accuracy=accuracy, forward_ms=timings, matte_errors=errors)

    # 3. deform_conv2d alone
    try:
        from torchvision.ops import deform_conv2d as torchvision_deform
    except ImportError:
        torchvision_deform = None
    side = args.size // 4
    gen = torch.Generator().manual_seed(0)
    xs = torch.randn(1, 64, side, side, generator=gen).to(device)
    offset = torch.randn(1, 98, side, side, generator=gen).to(device)
    mask = torch.rand(1, 49, side, side, generator=gen).to(device) * 2
    weight = (torch.randn(256, 64, 7, 7, generator=gen) / 56).to(device)
    deform: dict[str, float] = {}
    with torch.inference_mode():
        deform["ours fp32"] = timed(
            lambda: deform_conv2d(xs, offset, mask, weight, padding=(3, 3)), device, args.reps, args.warmup
        )
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            deform["ours, products in bf16"] = timed(
                lambda: deform_conv2d(xs, offset, mask, weight, padding=(3, 3)), device, args.reps, args.warmup
            )
        if torchvision_deform is not None:
            deform["torchvision fp32"] = timed(
                lambda: torchvision_deform(xs, offset, weight, padding=(3, 3), mask=mask),
                device,
                args.reps,
                args.warmup,
            )
            deform["rel. error ours vs torchvision"] = relative(
                deform_conv2d(xs, offset, mask, weight, padding=(3, 3)),
                torchvision_deform(xs, offset, weight, padding=(3, 3), mask=mask),
            )
    for key, value in deform.items():
        rows.append(
            (f"deform_conv2d 7x7 64->256 at {side}²: {key}", f"{value:.3g}" + ("" if "error" in key else " ms"))
        )
    report["deform_conv2d"] = deform

    # 4. the pipeline in-process
    sizes = [(int(w), int(h)) for w, h in (s.split("x") for s in args.pictures.split(","))]
    default = routes["auto"] if "auto" in routes else route(str(device), "auto")
    pipeline: dict[str, float] = {}
    for w, h in sizes:
        picture = photo((w, h))

        def matte_one(picture: np.ndarray = picture) -> list[np.ndarray]:
            return [m.cpu().numpy() for m in default.matte([picture])]  # the matte to the host, as a caller sees it

        pipeline[f"{w}x{h}"] = timed(matte_one, device, max(1, args.reps // 2), 1)
        rows.append((f"pipeline {w}x{h}, route default (uint8 in, uint8 matte out)", f"{pipeline[f'{w}x{h}']:.1f} ms"))
    report["pipeline_ms"] = pipeline

    # 5. through gRPC
    if not args.no_grpc:
        report["grpc"] = grpc_round_trips(sizes, args.reps)
        for name, found in report["grpc"].items():
            trip = found["round_trip_ms"]
            stages = ", ".join(f"{k} {v:.1f}" for k, v in found["server_stages_ms"].items())
            rows.append(
                (
                    f"gRPC Matte {name} JPEG on {found['device']}",
                    f"p50 {trip['p50']:.1f} ms, p90 {trip['p90']:.1f} ms ({stages})",
                )
            )

    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    print(f"torch {torch.__version__}, {report.get('gpu', device)}, nobg's deform_conv2d: {report['nobg_deform_conv']}")
    print(text)
    (args.out / "birefnet_check.json").write_text(json.dumps(report, indent=2))
    (args.out / "birefnet_check.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
