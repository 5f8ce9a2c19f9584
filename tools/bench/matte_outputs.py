"""What each image.matte output costs over the plain matte (docs/PERFORMANCE.md quotes the runs).

    python -m tools.bench.matte_outputs --device cuda --out DIR   # the GPU machine (run.py's section matte_outputs)
    python -m tools.bench.matte_outputs --cpu-ratios              # a CPU: u2netp through craftai serve, ratios

GPU (`--device cuda`), 4000x3000, device synchronised, median of --reps after a warm-up:
- foreground estimation alone: ours with every level on the GPU, ours with the coarse levels on the
  CPU (the service's choice), blur fusion (`blur_fusion` below), and the peer: pymatting's
  `estimate_foreground_ml` on the CPU, which transparent-background's `process(type="rgba")` runs
  (a subprocess, numba compiled first);
- each output made by `render` from a host picture and a matte on the GPU (the upload included);
- each encoder on the CPU (PNG in bands on every core, lossless WebP, JPEG);
- through gRPC: InSPyReNet (random weights) on `craftai serve`, a 4000x3000 JPEG, the round trip
  of each set of outputs against the matte alone, and the server's stages.
CPU (`--cpu-ratios`): u2netp (the real file) through `craftai serve` with CRAFTAI_DEVICE=cpu, a
1024x768 JPEG, each set of outputs against the matte alone, requests interleaved so that the
load of a shared machine falls on every set alike; ratios of medians only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from craftai import AiClient
from tools.bench import harness

REPO = Path(__file__).resolve().parents[2]

if TYPE_CHECKING:
    import torch

# name -> remove_background options; "matte" is the reference every other set is divided by
SETS: dict[str, dict[str, Any]] = {
    "matte": {"outputs": "matte"},
    "cutout": {"outputs": "cutout"},
    "cutout, naive": {"outputs": "cutout", "naive": True},
    "matte + cutout": {"outputs": "matte,cutout"},
    "composite over a colour": {"outputs": "composite", "bg_color": "#2060f0"},
    "composite over a colour, JPEG": {"outputs": "composite", "bg_color": "#2060f0", "format": "jpeg"},
    "composite over a blur (12 px)": {"outputs": "composite", "bg_blur": 12.0},
    "composite over a picture": {"outputs": "composite", "bg_image": "coffee"},
    "mask": {"outputs": "mask"},
    "cutout, WebP": {"outputs": "cutout", "format": "webp"},
    "all four": {"outputs": "matte,cutout,composite,mask", "bg_color": "#2060f0"},
}
TINY_SETS = ("matte", "all four")


def blur_fusion(image: torch.Tensor, alpha: torch.Tensor, first: int = 90, second: int = 6) -> torch.Tensor:
    """Forte and Pitié's foreground estimate ("Approximate Fast Foreground Colour Estimation", ICIP
    2021), written from the paper for comparison (it is not served): two passes, boxes of width
    `first` then `second` (their values), F = F̄ + α (I − α F̄ − (1 − α) B̄) with F̄ = blur(F α) / blur(α)
    and B̄ = blur(B (1 − α)) / blur(1 − α); the first pass from F = B = I, the second from the first's
    F and B̄. (1, 3, H, W), (1, 1, H, W)."""
    from craftai_infer.pipelines.guided_filter import box_mean

    def one(fg: torch.Tensor, bg: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = width // 2
        blurred_alpha = box_mean(alpha, r)
        f_bar = box_mean(fg * alpha, r) / (blurred_alpha + 1e-5)
        b_bar = box_mean(bg * (1 - alpha), r) / ((1 - blurred_alpha) + 1e-5)
        return (f_bar + alpha * (image - alpha * f_bar - (1 - alpha) * b_bar)).clamp(0, 1), b_bar

    fg, bg = one(image, image, first)
    return one(fg, bg, second)[0]


def _options(name: str, background: bytes) -> dict[str, Any]:
    options = dict(SETS[name])
    if options.get("bg_image") == "coffee":
        options["bg_image"] = background
    return options


def _picture(width: int, height: int) -> bytes:
    return harness.jpeg((width, height))


def _background() -> bytes:
    from craftai_dev.samples import photos

    return photos()["coffee.png"].read_bytes()


def round_trips(
    ai: AiClient, picture: bytes, names: tuple[str, ...], reps: int, recipe: str
) -> dict[str, dict[str, Any]]:
    """Each set's round trips, interleaved (one of each, then again), after one warm-up of each."""
    background = _background()
    samples: dict[str, list[float]] = {name: [] for name in names}
    stages: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    sizes: dict[str, int] = {}
    for rep in range(reps + 1):
        for name in names:
            started = time.perf_counter()
            result = ai.remove_background(picture, recipe=recipe, **_options(name, background))
            elapsed = (time.perf_counter() - started) * 1000
            if rep:
                samples[name].append(elapsed)
                stages[name].append(result.timing_ms)
            sizes[name] = sum(len(image.data) for image in result.images.values())
    base = statistics.median(samples["matte"])
    return {
        name: {
            "round_trip_ms": harness.percentiles(samples[name]),
            "ratio_to_matte": statistics.median(samples[name]) / base,
            "server_stages_ms": {k: statistics.median(s[k] for s in stages[name]) for k in stages[name][0]},
            "bytes": sizes[name],
        }
        for name in names
    }


# ---- in-process, on the device -----------------------------------------------------------------


def _pymatting_ms(width: int, height: int, reps: int) -> float | None:
    """pymatting's estimate_foreground_ml on this machine's CPU, in a process of its own (numba
    compiled first, outside the timing; NUMBA_DISABLE_JIT, which another section sets, removed)."""
    code = f"""
import json, time, numpy as np
from craftai_dev.pymatting_reference import estimate_foreground_ml as reference
estimate_foreground_ml = reference()
rng = np.random.default_rng(0)
image = rng.random(({height}, {width}, 3), dtype=np.float32)
alpha = rng.random(({height}, {width}), dtype=np.float32)
estimate_foreground_ml(image[:64, :64], alpha[:64, :64])
samples = []
for _ in range({reps}):
    started = time.perf_counter(); estimate_foreground_ml(image, alpha); samples.append(time.perf_counter() - started)
print(json.dumps(sorted(samples)[len(samples) // 2] * 1000))
"""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        print(f"   pymatting not measured: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def in_process(device: str, tiny: bool, reps: int) -> dict[str, Any]:
    import torch
    from PIL import Image

    from craftai_dev import hair
    from craftai_dev.samples import photos
    from craftai_infer import encodings
    from craftai_infer.pipelines.foreground import estimate_foreground
    from craftai_infer.pipelines.matte_outputs import render
    from craftai_infer.pipelines.matte_spec import Blur, Cover, OutputsSpec, Solid

    width, height = (61, 41) if tiny else (4000, 3000)
    on = torch.device(device)
    picture = np.array(Image.open(photos()["astronaut.png"]).convert("RGB").resize((width, height)))
    small = hair.hair_alpha(max(8, height // 4), max(8, width // 4))
    soft = Image.fromarray((small * 255).astype(np.uint8)).resize((width, height), Image.Resampling.BILINEAR)
    matte = np.array(soft)
    matte_on = torch.from_numpy(matte).to(on)
    image = torch.from_numpy(picture).permute(2, 0, 1)[None].float().to(on) / 255
    alpha = matte_on[None, None].float() / 255
    coffee = np.array(Image.open(photos()["coffee.png"]).convert("RGB"))
    warm = 0 if tiny else 2

    def timed(fn: Callable[[], Any]) -> float:
        return harness.timed_on(fn, reps, warm, on)

    estimates = {
        "ours, every level on the device": timed(lambda: estimate_foreground(image, alpha)),
        "ours, coarse levels on the CPU (the service)": timed(
            lambda: estimate_foreground(image, alpha, coarse_device=torch.device("cpu"))
        ),
        "blur fusion (Forte & Pitié 2021)": timed(lambda: blur_fusion(image, alpha)),
    }
    peer = None if tiny else _pymatting_ms(width, height, 3)
    specs = {
        "matte only (read back)": OutputsSpec(frozenset({"matte"})),
        "cutout": OutputsSpec(frozenset({"cutout"})),
        "cutout, naive": OutputsSpec(frozenset({"cutout"}), naive=True),
        "composite over a colour": OutputsSpec(frozenset({"composite"}), background=Solid((32, 96, 240, 255))),
        "composite over a blur (12 px)": OutputsSpec(frozenset({"composite"}), background=Blur(12.0)),
        "composite over a picture": OutputsSpec(frozenset({"composite"}), background=Cover(coffee)),
        "mask": OutputsSpec(frozenset({"mask"})),
    }

    def rendering(spec: OutputsSpec) -> Callable[[], Any]:
        return lambda: render(picture, matte_on, spec, device)

    made = {name: timed(rendering(spec)) for name, spec in specs.items()}
    cutout = render(picture, matte_on, specs["cutout"], device).cutout
    composite = render(picture, matte_on, specs["composite over a colour"], device).composite
    assert cutout is not None and composite is not None
    cores = os.cpu_count() or 1
    with ThreadPoolExecutor(cores) as pool:
        coders = {
            "matte, PNG": (matte, encodings.Encoding("png")),
            "cutout, PNG": (cutout, encodings.Encoding("png")),
            "composite, PNG": (composite, encodings.Encoding("png")),
            "composite, JPEG q90": (composite, encodings.Encoding("jpeg")),
            "matte, WebP": (matte, encodings.Encoding("webp")),
            "cutout, WebP": (cutout, encodings.Encoding("webp")),
            "mask, PNG (1-bit)": (matte > 127, encodings.Encoding("png")),
        }
        encoded: dict[str, dict[str, float]] = {}
        for name, (pixels, encoding) in coders.items():

            def encode(p: np.ndarray = pixels, e: encodings.Encoding = encoding) -> bytes:
                return encodings.encode(p, e, pool, cores)

            samples = harness.timed_ms(encode, 3, 1)
            data = encode()
            encoded[name] = {"ms": statistics.median(samples), "megabytes": len(data) / 1e6}
        pillow = harness.timed_ms(lambda: _pillow_png(cutout), 3, 1)
        encoded["cutout, PNG by Pillow (before)"] = {"ms": statistics.median(pillow), "megabytes": 0.0}
    return {
        "picture": f"{width}x{height}",
        "device": device,
        "estimate_ms": estimates,
        "pymatting_cpu_ms": peer,
        "render_ms": made,
        "encode_ms": encoded,
        "cpu_cores": cores,
    }


def _pillow_png(pixels: np.ndarray) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


# ---- through gRPC --------------------------------------------------------------------------------


def grpc_inspyrenet(device: str, reps: int) -> dict[str, Any]:
    from craftai_dev.inspyrenet_fixture import checkpoints

    made = checkpoints()["random"]  # the test suite's randomised checkpoint, made once and cached
    with harness.scratch("bench-outputs-") as work:
        width, height = 4000, 3000
        with harness.files_on_loopback(made.path.parent) as url:
            pin = {"size": made.pin.size, "sha256": made.pin.sha256, "url": f"{url}/{made.path.name}"}
            recipes = harness.pinned_catalogue(work / "recipes.toml", {"inspyrenet-swinb": {"weights": pin}})
            env = {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": device}
            with harness.serve(work, env) as address, AiClient(app_id="bench", target=address) as ai:
                list(ai.setup("image.matte", "inspyrenet-swinb"))
                found = round_trips(ai, _picture(width, height), tuple(SETS), reps, "inspyrenet-swinb")
                served_on = ai.runtime().device
        return {"picture": f"{width}x{height} JPEG", "recipe": "InSPyReNet", "device": served_on, "sets": found}


def cpu_ratios(width: int, height: int, reps: int, names: tuple[str, ...] = tuple(SETS)) -> dict[str, Any]:
    """u2netp (the real file) through craftai serve on the CPU: each set against the matte alone."""
    from craftai_dev.files import u2netp_onnx

    with harness.scratch("bench-outputs-cpu-") as work:
        with harness.serve_u2netp_cpu(work, u2netp_onnx()) as address, AiClient(app_id="bench", target=address) as ai:
            list(ai.setup("image.matte", "u2netp", "onnxruntime"))
            found = round_trips(ai, _picture(width, height), names, reps, "u2netp")
        return {
            "picture": f"{width}x{height} JPEG",
            "recipe": "u2netp",
            "device": "cpu",
            "cpu_cores": os.cpu_count(),
            "sets": found,
        }


def table(sets: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| outputs | round trip p50 ms | ratio to the matte alone | server model ms | server encode ms | bytes |",
        "|---|---|---|---|---|---|",
    ]
    for name, found in sets.items():
        stages = found["server_stages_ms"]
        lines.append(
            f"| {name} | {found['round_trip_ms']['p50']:.1f} | {found['ratio_to_matte']:.2f} | "
            f"{stages.get('model', 0):.1f} | {stages.get('encode', 0):.1f} | {found['bytes']:,} |"
        )
    return "\n".join(lines)


def gpu_report(found: dict[str, Any]) -> str:
    inproc, served = found["in_process"], found["grpc"]
    lines = [f"### Matte outputs in-process ({inproc['picture']}, {inproc['device']})", ""]
    lines += ["| foreground estimation | ms |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in inproc["estimate_ms"].items()]
    peer = inproc["pymatting_cpu_ms"]
    if peer:
        lines += [f"| peer: pymatting estimate_foreground_ml on the CPU (transparent-background's rgba) | {peer:.1f} |"]
    lines += ["", "| output made on the device from a host picture and a device matte | ms |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in inproc["render_ms"].items()]
    lines += ["", f"| encoder ({inproc['cpu_cores']} cores) | ms | MB |", "|---|---|---|"]
    lines += [f"| {k} | {v['ms']:.1f} | {v['megabytes']:.2f} |" for k, v in inproc["encode_ms"].items()]
    lines += ["", f"### Matte outputs through gRPC ({served['picture']}, {served['recipe']} on {served['device']})", ""]
    lines += [table(served["sets"]), ""]
    return "\n".join(lines)


def gpu(out: Path, device: str, tiny: bool) -> dict[str, Any]:
    """run.py's section matte_outputs: in-process on the torch device, then through gRPC."""
    import torch

    on = "cuda" if device != "cpu" and torch.cuda.is_available() else "cpu"
    reps = 1 if tiny else 10
    # At the tiny size the round trips go through u2netp (InSPyReNet's 1024² stages take seconds a
    # picture on a CPU; matte_grpc's tiny run checks its serving): the same code, checked quickly.
    served = cpu_ratios(61, 41, 1, TINY_SETS) if tiny else grpc_inspyrenet(device, 8)
    found = {"in_process": in_process(on, tiny, reps), "grpc": served}
    (out / "matte_outputs.json").write_text(json.dumps(found, indent=2))
    (out / "matte_outputs.md").write_text(gpu_report(found))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (the GPU when one answers) or cpu")
    parser.add_argument("--cpu-ratios", action="store_true", help="u2netp through craftai serve on the CPU")
    parser.add_argument("--picture", default="1024x768", help="--cpu-ratios: the picture's size")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    if options.cpu_ratios:
        width, height = (int(v) for v in options.picture.split("x"))
        found = cpu_ratios(width, height, options.reps)
        (options.out / "matte_outputs_cpu.json").write_text(json.dumps(found, indent=2))
        print(f"u2netp through craftai serve, CPU ({found['cpu_cores']} cores), {found['picture']}:\n")
        print(table(found["sets"]))
        return 0
    print(gpu_report(gpu(options.out, options.device, options.tiny)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
