"""Issue 19's figures in one run on the GPU machine, printed as one markdown table (STEPS=speed).

    python3 tools/gpu/speed_check.py --out DIR                # the H200: every row, under 4 minutes
    python3 tools/gpu/speed_check.py --tiny --device cpu      # here: every row at a tiny size
    (tests/bench/test_speed_check.py runs the in-process section so; run.py's sections, which the
    others call, are run tiny by tests/bench/test_bench_runs.py)

Rows, in this order (each section on its own: one that fails is reported and the rest still run;
a section that would start after --budget seconds, 240 by default, is skipped and says so):

1. InSPyReNet 4000x3000 in this process, the GPU route as the service builds it, with the random
   checkpoint calibrated on a photo (tests/support/inspyrenet_fixture.py `calibrated`: the matte
   has a subject and edges, so the edge refinement filters a real share of the 192 tiles; the
   count is printed) beside the uncalibrated one (0 tiles: what the figure measured before), and
   transparent-background's `Remover.process()` on the same picture when its package imports.
2. InSPyReNet 1280x960 and 4000x3000 JPEGs through gRPC (`craftai serve`, the calibrated file),
   with the server's stage times (decode, model, encode).
3. u2netp through `craftai serve` against rembg's `remove()`, interleaved rounds on this machine's
   CPU cores (the ratio is the median of the rounds' ratios).
4. SAM 2.1 encoder pictures/s through gRPC at concurrency 1, 8 and 32 (2048x1536 JPEGs; builds the
   SAM fixture first when STEPS=sam has not).

Writes speed_check.json and speed_check.md under --out.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for src in (
    "clients/wire/src",
    "clients/python/src",
    "services/common/src",
    "services/models/src",
    "services/catalogue/src",
    "services/prepare/src",
    "services/infer/src",
    ".",
):
    if str(REPO / src) not in sys.path:
        sys.path.insert(0, str(REPO / src))

# The side the calibration sees: the network's input for every picture over 1280 px.
CALIBRATION_SIDE = {False: 1280, True: 64}


def calibrated_checkpoint(device: str, tiny: bool) -> Any:
    from tests.support.inspyrenet_fixture import calibrated

    return calibrated(CALIBRATION_SIDE[tiny], device)


def inprocess(device: str, tiny: bool) -> dict[str, Any]:
    import numpy as np
    import torch
    from PIL import Image

    from craftai_infer.pipelines.matte_inspyrenet import MatteSettings, network_input, refined_tiles, tile_count
    from craftai_infer.routes import RouteFiles
    from craftai_infer.routes.inspyrenet_torch import InspyrenetTorch
    from tests.support.inspyrenet_fixture import checkpoints
    from tools.bench.harness import percentiles, timed_ms
    from tools.samples import photos

    w, h = (120, 90) if tiny else (4000, 3000)
    # tiny: a small network input, so that the small picture is still reduced and refined
    settings = MatteSettings(max_side=32, tile=16) if tiny else MatteSettings()
    rgb = np.asarray(Image.open(photos()["astronaut.png"]).convert("RGB").resize((w, h), Image.Resampling.BICUBIC))

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    result: dict[str, Any] = {"picture": f"{w}x{h}", "tiles": tile_count(h, w, settings)}
    started = time.perf_counter()
    made = {"calibrated": calibrated_checkpoint(device, tiny), "uncalibrated": checkpoints()["random"]}
    result["calibration_s"] = time.perf_counter() - started
    for name, checkpoint in made.items():
        route = InspyrenetTorch(RouteFiles({"weights": checkpoint.path}, None, 0), device)
        route.warm_up(lambda _message: None)

        def matte(route: InspyrenetTorch = route) -> Any:
            out = route.matte([rgb])[0]
            sync()
            return out.cpu() if isinstance(out, torch.Tensor) else out

        # the refinement's tiles, from the network's output as the pipeline computes it
        autocast = torch.autocast(device.split(":", 1)[0], dtype=route.autocast, enabled=route.autocast is not None)
        started = time.perf_counter()
        with torch.inference_mode(), autocast:
            prepared = network_input(rgb, torch.device(device), settings)
            out = route.forward(prepared.x).float().clamp(0.0, 1.0)
        # tiny: that one forward is the sample (the route's own settings would not refine 120x90)
        samples = [(time.perf_counter() - started) * 1000] if tiny else timed_ms(matte, 10, 2)
        matte_now = matte().numpy() if not tiny else None
        row: dict[str, Any] = {"ms": percentiles(samples), "refined_tiles": refined_tiles(prepared, out, settings)}
        if matte_now is not None:
            row["share_over_half"] = float((matte_now > 127).mean())
            row["share_between"] = float(((matte_now > 2) & (matte_now < 253)).mean())
        result[name] = row
        del route
    result["transparent_background"] = remover(rgb, made["calibrated"].path, device, tiny)
    return result


def remover(rgb: Any, checkpoint: Path, device: str, tiny: bool) -> dict[str, Any]:
    """transparent-background's own `Remover.process()` on the picture (its full pipeline), with the
    calibrated weights saved in its .pth layout; the reason when it cannot run here."""
    try:
        import torch
        from PIL import Image
        from safetensors.torch import load_file
        from transparent_background import Remover
    except Exception as exc:  # its package imports a GUI stack the machine may lack
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    from tools.bench.harness import percentiles, timed_ms

    pth = checkpoint.with_suffix(".pth")
    if not pth.exists():
        torch.save(load_file(str(checkpoint)), pth)
    try:
        them = Remover(mode="base", jit=False, device=device, ckpt=str(pth))
        picture = Image.fromarray(rgb)
        reps = (1, 0) if tiny else (5, 1)

        def sync() -> None:
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        def run(kind: str) -> Callable[[], Any]:
            def call() -> Any:
                out = them.process(picture, type=kind)
                sync()
                return out

            return call

        return {kind: percentiles(timed_ms(run(kind), *reps)) for kind in ("map", "rgba")}
    except Exception as exc:
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}


def matte_grpc(out: Path, device: str, tiny: bool, calibrate_on: str) -> dict[str, Any]:
    """`device`: the server's CRAFTAI_DEVICE; `calibrate_on`: where the checkpoint is calibrated
    (a device torch names: this section may run without the in-process one, which calibrates too)."""
    from tools.bench import run

    checkpoint = None if tiny else calibrated_checkpoint(calibrate_on, tiny)
    return run.matte_grpc(out, device, tiny, checkpoint)


def sam_grpc(out: Path, device: str, tiny: bool) -> dict[str, Any]:
    from tools.bench import run

    return run.sam_grpc(out, device, tiny)


def u2netp_cpu(out: Path, tiny: bool) -> dict[str, Any]:
    from tools.bench import run

    return run.u2netp_cpu(out, tiny)


def table(results: dict[str, Any]) -> str:
    """The issue's table: figure, measured here, target."""
    rows: list[tuple[str, str, str]] = []

    def ms(p: dict[str, float]) -> str:
        return f"{p['p50']:.1f} ms (p90 {p['p90']:.1f})"

    r = results.get("inprocess")
    if isinstance(r, dict) and "calibrated" in r:
        c, u = r["calibrated"], r["uncalibrated"]
        rows.append(
            (
                f"InSPyReNet {r['picture']} in-process, calibrated checkpoint",
                f"{ms(c['ms'])}, refined {c['refined_tiles']} of {r['tiles']} tiles"
                + (f", matte >0.5 on {c['share_over_half']:.0%}" if "share_over_half" in c else ""),
                "measured with the refinement doing its real work",
            )
        )
        rows.append(
            (
                f"InSPyReNet {r['picture']} in-process, uncalibrated checkpoint (before)",
                f"{ms(u['ms'])}, refined {u['refined_tiles']} of {r['tiles']} tiles",
                "-",
            )
        )
        tb = r["transparent_background"]
        rows.append(
            (
                "peer: transparent-background `Remover.process()` (same picture, calibrated weights)",
                tb["unavailable"] if "unavailable" in tb else f"type=map {ms(tb['map'])}; type=rgba {ms(tb['rgba'])}",
                "-",
            )
        )
    r = results.get("matte_grpc")
    if isinstance(r, dict):
        for size, target in (("1280x960", "<= 40 ms"), ("4000x3000", "<= 150 ms"), ("61x41", "-")):
            if size in r:
                stages = ", ".join(f"{k} {v:.1f}" for k, v in r[size]["server_stages_ms"].items())
                measured = f"{ms(r[size]['round_trip_ms'])}; server: {stages}"
                rows.append((f"InSPyReNet {size} JPEG through gRPC", measured, target))
    r = results.get("sam_grpc")
    if isinstance(r, dict):
        rates = ", ".join(f"{c}: {v:.1f}/s" for c, v in r["encoder_pictures_per_s"].items())
        rows.append((f"SAM encoder pictures/s through gRPC by concurrency ({r['picture']})", rates, ">= 450 at 32"))
    r = results.get("u2netp_cpu")
    if isinstance(r, dict):
        ratios = ", ".join(f"{c} client(s): {v:.2f}x" for c, v in r["ratio"].items())
        spinning = ", ".join(f"{v:.2f}x" for v in r["ratio_spinning"].values())
        rows.append(
            (
                f"u2netp through `craftai serve` vs rembg `remove()`, {results['cpus']} CPU cores, interleaved",
                f"{ratios} (threads spinning: {spinning}); same matte: {r['same_output']}",
                ">= 1.1x",
            )
        )
    lines = ["| figure | measured | target |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    for name, value in results.items():
        if isinstance(value, dict) and "error" in value:
            lines.append(f"\n{name} failed: {value['error']}")
        elif value == "skipped":
            lines.append(f"\n{name} skipped: the time budget was spent")
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> str:
    from tools.bench import harness

    text = f"issue 19 figures, {results['date']}, {results['gpu'] or 'CPU'}, {results['cpus']} CPU cores\n\n"
    return harness.write_report(out, "speed_check", results, text + table(results), show=False)


def main(argv: list[str] | None = None) -> int:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and counts: checks that everything runs")
    parser.add_argument("--sections", default="inprocess,matte_grpc,u2netp_cpu,sam_grpc")
    parser.add_argument(
        "--budget", type=float, default=240.0, help="seconds after which no section starts (not with --tiny)"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", REPO / "out" / "gpu")) / "speed")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(0) if options.device.startswith("cuda") else "",
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
    }
    grpc_device = "cpu" if options.device == "cpu" else "auto"
    sections: dict[str, Callable[[], dict[str, Any]]] = {
        "inprocess": lambda: inprocess(options.device, options.tiny),
        "matte_grpc": lambda: matte_grpc(options.out, grpc_device, options.tiny, options.device),
        "u2netp_cpu": lambda: u2netp_cpu(options.out, options.tiny),
        "sam_grpc": lambda: sam_grpc(options.out, grpc_device, options.tiny),
    }
    began = time.monotonic()
    failed = False
    unknown = set(options.sections.split(",")) - set(sections)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; from {', '.join(sections)}")
    for name, section in sections.items():
        if name not in options.sections.split(","):
            continue
        if not options.tiny and time.monotonic() - began > options.budget:
            results[name] = "skipped"
            continue
        started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            results[name] = section()
        except Exception as exc:
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            failed = True
        print(f"   {name} in {time.monotonic() - started:.0f} s", flush=True)
        write(results, options.out)  # after each section: a run cut short keeps what it measured
    print(write(results, options.out))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
