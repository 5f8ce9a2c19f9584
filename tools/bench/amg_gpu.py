"""Segment everything on the GPU: this project's generator through gRPC (torch route, `craftai
serve` on loopback) against Meta's SAM2AutomaticMaskGenerator in-process, same weights, picture
and parameters, one run each after a warm-up.

    python -m tools.bench.amg_gpu [--out DIR] [--size 1024x768] [--side 32]

Weights: the random-weight SAM 2.1 tiny fixture (craftai_dev.sam21); Meta's model loads
its state_dict, ours is prepared from its ONNX pair by the prepare service. Meta's generator
runs as published (output_mode "binary_mask", its default), with torchvision's NMS where
torchvision imports (else craftai_dev.amg_reference's stand-in, said in the output).

Parameter sets: Meta's defaults (on random weights no mask passes pred_iou_thresh 0.8, so this
times the decoder and the filters, and ours never upscales a mask: its grid's second step only
runs for points with a mask above the threshold), "every-mask-made" (Meta's defaults but
pred_iou_thresh 0: every point's masks are made and go to the stability filter, on both sides:
what a picture where every point passes costs), and "calibrated" (pred_iou_thresh 0.3, stability
0.5: many masks survive and every step has work). Times (device synchronised, as the caller sees them):

- ours: SegmentEverything on an open session (the picture already encoded) and OpenSession +
  SegmentEverything (the encoder included) on a fresh session, the median of OPEN_REPEATS, with
  the OpenSession alone and its server stages beside it (medians too); round trips through gRPC; the fresh
  sessions twice: opened from the PNG file (the server decodes it) and from the array of pixels
  (the SDK sends it as a binary PPM: what Meta's generator is given);
- Meta: `generate(picture)` on the array (its set_image, the encoder, included), and Pillow's
  decode of the same PNG timed in its process (for the speed-up with both starting from the file).

Ours runs twice: CRAFTAI_GPU_PRECISION at its default (the encoder and the grid's decoder batches
in fp16, the latter compiled: CRAFTAI_GPU_COMPILE's default) and fp32 throughout (uncompiled). In
this process, one grid batch of the route in fp32, fp16 and bf16 (the reduced ones compiled), with
the candidates of the reduced precisions against fp32's (torch's profile of an fp32 batch in
amg_grid_profile.txt). tools/gpu/decoder_fusion.py times the decoder alone, compiled or not.

Parity on the same run: how many of Meta's masks have one of ours with IoU >= 0.9, the counts.
Writes amg_gpu.json and amg_gpu.md into --out.
"""

from __future__ import annotations

import argparse
import functools
import io
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from craftai import AiClient
from tools.bench import harness

if TYPE_CHECKING:
    from craftai_infer.routes import Precision

PRECISIONS = ("auto", "fp32")  # the server's CRAFTAI_GPU_PRECISION: the default, and fp32 throughout
OPEN_REPEATS = 3  # OpenSession + SegmentEverything on a fresh session: the median of these
GRID_BATCHES = 4  # batches of the grid whose candidates are compared across precisions in-process
CASES: dict[str, dict[str, Any]] = {
    "meta-defaults": {},
    "every-mask-made": {"pred_iou_thresh": 0.0},
    "calibrated": {"pred_iou_thresh": 0.3, "stability_score_thresh": 0.5},
}


def picture(size: tuple[int, int]) -> np.ndarray:
    from craftai_dev.samples import photos

    image = Image.open(photos()["astronaut.png"]).convert("RGB").resize(size, Image.Resampling.BICUBIC)
    return np.asarray(image)


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def parity(ours: list[np.ndarray], theirs: list[np.ndarray]) -> dict[str, Any]:
    import torch

    from craftai_dev.masks import iou_matrix

    device = "cuda" if torch.cuda.is_available() else "cpu"
    best = iou_matrix(theirs, ours, device).max(axis=1, initial=0.0)
    return {"ours": len(ours), "meta": len(theirs), "meta_matched": int((best >= 0.9).sum())}


def meta_runs(weights: Path, pixels: np.ndarray, side: int) -> dict[str, Any]:
    import torch

    from craftai_dev import amg_reference, sam_fixture

    amg_reference.install_standins()
    from torchvision.ops import boxes

    nms_source = "torchvision" if hasattr(boxes, "__file__") else "craftai_dev.amg_reference stand-in"
    from sam2.automatic_mask_generator import SAM2AutomaticMaskGenerator

    model = sam_fixture.reference_model(weights).to("cuda")
    SAM2AutomaticMaskGenerator(model, points_per_side=8).generate(pixels)  # warm-up
    data = png(pixels)
    decodes = harness.timed_ms(lambda: np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), 5, 1)
    # what a caller of Meta's generator starting from the same PNG file pays before `generate`
    results: dict[str, Any] = {"nms": nms_source, "png_decode_ms": float(np.median(decodes))}
    for name, parameters in CASES.items():
        generator = SAM2AutomaticMaskGenerator(model, points_per_side=side, **parameters)
        torch.cuda.synchronize()
        started = time.perf_counter()
        found = generator.generate(pixels)
        torch.cuda.synchronize()
        results[name] = {"ms": (time.perf_counter() - started) * 1000, "masks": [r["segmentation"] for r in found]}
    return results


def our_runs(pixels: np.ndarray, side: int, precision: str, inprocess: bool) -> dict[str, Any]:
    from tools.bench import run

    results: dict[str, Any] = {}
    with run.sam_served("cuda", {"CRAFTAI_GPU_PRECISION": precision}) as served:
        with AiClient(app_id="bench", target=served.address) as ai:
            data = png(pixels)
            with ai.open_session(data, "sam2-hiera-tiny", "torch") as session:
                session.segment_everything(points_per_side=8)  # warm-up: graphs captured
                for name, parameters in CASES.items():
                    started = time.perf_counter()
                    found = session.segment_everything(points_per_side=side, **parameters)
                    everything_ms = (time.perf_counter() - started) * 1000
                    fresh_runs = {}
                    for given, sent in (("png", data), ("array", pixels)):
                        opens, totals, stages = [], [], []
                        for _ in range(OPEN_REPEATS):
                            started = time.perf_counter()
                            with ai.open_session(sent, "sam2-hiera-tiny", "torch") as fresh:
                                opens.append((time.perf_counter() - started) * 1000)
                                stages.append(fresh.timing_ms)
                                fresh.segment_everything(points_per_side=side, **parameters)
                            totals.append((time.perf_counter() - started) * 1000)
                        open_stages = {k: float(np.median([s[k] for s in stages])) for k in stages[0]}
                        fresh_runs[given] = (float(np.median(totals)), float(np.median(opens)), open_stages)
                    results[name] = {
                        "everything_ms": everything_ms,
                        "open_and_everything_ms": fresh_runs["png"][0],
                        "open_ms": fresh_runs["png"][1],
                        "open_stages_ms": fresh_runs["png"][2],
                        "array_open_and_everything_ms": fresh_runs["array"][0],
                        "array_open_ms": fresh_runs["array"][1],
                        "array_open_stages_ms": fresh_runs["array"][2],
                        "server_stages_ms": found.timing_ms,
                        "device": found.device,
                        "candidates": found.candidates,
                        "masks": [m.array() for m in found.masks],
                    }
        if inprocess:
            results["inprocess"] = grid_inprocess(served.log.parent, pixels, side)
    return results


def grid_inprocess(work: Path, pixels: np.ndarray, side: int) -> dict[str, Any]:
    """The grid in this process, the route built from the folder the server prepared (while it
    idles) in each GPU precision: one batch's time for each case, and at the calibrated case the
    candidates of the first GRID_BATCHES batches against fp32's (how many, and how many of fp32's
    have one with IoU >= 0.9); torch's profile of one fp32 batch at Meta's defaults."""
    import torch

    from craftai_infer.masks import decode_counts
    from craftai_infer.pipelines import mask_generator
    from tools.bench import run

    height, width = pixels.shape[:2]
    points = mask_generator.grid_points(side, height, width)
    out: dict[str, Any] = {}
    reference: list[np.ndarray] = []
    precisions: tuple[Precision, ...] = ("fp32", "fp16", "bf16")
    for precision in precisions:
        route, _ = run.sam_torch_route(work, "cuda", precision, compile_grid=True)
        runner = route.runner
        embedding = route.encode([pixels])[0]
        for name, parameters in CASES.items():
            settings = mask_generator.Everything(points_per_side=side, **parameters)
            chunk = mask_generator.batches(points, settings.points_per_batch)[0]
            samples = harness.timed_ms(functools.partial(runner.grid, embedding, chunk, settings), 20, 3)
            out[f"{precision}, {name}: one batch ms"] = harness.percentiles(samples)
        settings = mask_generator.Everything(points_per_side=side, **CASES["calibrated"])
        found = [
            runner.grid(embedding, c, settings)
            for c in mask_generator.batches(points, settings.points_per_batch)[:GRID_BATCHES]
        ]
        masks = [decode_counts(c, height, width) for f in found for c in f.counts]
        if precision == "fp32":
            reference = masks
            out["fp32 candidates"] = len(masks)
        else:
            stats = parity(masks, reference)
            out[f"{precision} candidates, of fp32's matched"] = (len(masks), stats["meta_matched"])
        if precision == "fp32":
            settings = mask_generator.Everything(points_per_side=side)
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(3):
                    runner.grid(embedding, points[: settings.points_per_batch], settings)
                torch.cuda.synchronize()
            out["profile"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        del route, runner, embedding
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/gpu"))
    parser.add_argument("--size", default="1024x768")
    parser.add_argument("--side", type=int, default=32)
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    from craftai_dev import sam21

    fixture = sam21.ensure_fixture()
    width, height = (int(v) for v in options.size.split("x"))
    pixels = picture((width, height))
    ours = {p: our_runs(pixels, options.side, p, inprocess=k == 0) for k, p in enumerate(PRECISIONS)}
    theirs = meta_runs(fixture.weights, pixels, options.side)
    rows = []
    summary: dict[str, Any] = {
        "picture": f"{width}x{height} PNG",
        "points_per_side": options.side,
        "nms": theirs["nms"],
    }
    for precision in PRECISIONS:
        for name in CASES:
            o, t = ours[precision][name], theirs[name]
            stats = parity(o["masks"], [np.asarray(m, dtype=bool) for m in t["masks"]])
            speedup = t["ms"] / o["open_and_everything_ms"]
            from_array = t["ms"] / o["array_open_and_everything_ms"]
            from_file = (t["ms"] + theirs["png_decode_ms"]) / o["open_and_everything_ms"]
            summary[f"{precision}: {name}"] = {
                "ours_everything_ms": o["everything_ms"],
                "ours_open_and_everything_ms": o["open_and_everything_ms"],
                "ours_open_ms": o["open_ms"],
                "ours_open_stages_ms": o["open_stages_ms"],
                "ours_array_open_and_everything_ms": o["array_open_and_everything_ms"],
                "ours_array_open_ms": o["array_open_ms"],
                "ours_array_open_stages_ms": o["array_open_stages_ms"],
                "meta_png_decode_ms": theirs["png_decode_ms"],
                "speedup_array_vs_array": from_array,
                "speedup_file_vs_file": from_file,
                "ours_server_stages_ms": o["server_stages_ms"],
                "meta_generate_ms": t["ms"],
                "speedup_with_encoder": speedup,
                "candidates": o["candidates"],
                **stats,
            }
            rows.append(
                f"| {name} | {precision} | {o['everything_ms']:.0f} | {o['open_and_everything_ms']:.0f} | "
                f"{t['ms']:.0f} | {speedup:.1f}x | {o['array_open_and_everything_ms']:.0f} | {from_array:.1f}x | "
                f"{from_file:.1f}x | {o['candidates']} | {stats['ours']} / {stats['meta']} | {stats['meta_matched']} |"
            )
    table = "\n".join(
        [
            f"Picture {width}x{height}, points_per_side {options.side}, Meta's NMS: {theirs['nms']}",
            "",
            "| parameters | ours: CRAFTAI_GPU_PRECISION | ours: SegmentEverything ms | "
            "ours: OpenSession (PNG) + SegmentEverything ms | Meta generate ms | speed-up (ours from the PNG, "
            "Meta given the array) | ours: OpenSession (array) + SegmentEverything ms | speed-up, both given the "
            f"array | speed-up, both from the PNG (Meta + Pillow's decode, {theirs['png_decode_ms']:.1f} ms) | "
            "ours: candidates | masks ours / Meta | Meta's matched (IoU >= 0.9) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    inprocess = ours[PRECISIONS[0]].get("inprocess", {})
    summary["inprocess"] = {k: v for k, v in inprocess.items() if k != "profile"}
    table += "\n\nIn this process, one batch of the grid (the route the server prepared):\n\n"
    table += "\n".join(
        f"- {k}: p50 {v['p50']:.2f}, p90 {v['p90']:.2f}" if isinstance(v, dict) else f"- {k}: {v}"
        for k, v in summary["inprocess"].items()
    )
    if "profile" in inprocess:
        (options.out / "amg_grid_profile.txt").write_text(inprocess["profile"])
    harness.write_report(options.out, "amg_gpu", summary, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
