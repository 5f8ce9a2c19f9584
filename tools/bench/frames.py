#!/usr/bin/env python3
"""A video's frames through one MatteFrames stream against `rembg b` on the same raw frames.

    .venv/bin/python -m tools.bench.frames --out out/bench/frames.json                  # 2 CPU cores, 1280x720
    .venv/bin/python -m tools.bench.frames --size 320x240 --frames 8 --out /tmp/frames.json
    python3 -m tools.bench.frames --device cuda --size 1920x1080 --no-rembg --out out/gpu/frames.json

The frames are a made clip's (craftai_dev.clips.moving_frames: a subject moving over a still
background), in memory as raw RGB. Each side gets the same frames and does rembg b's work: a
naive cutout of each frame (the picture's colours under u2netp's matte) written as a PNG file.

- rembg: `rembg b WIDTH HEIGHT -m u2netp -o DIR/%d.png` (rembg's command for a byte stream: raw
  RGB frames on its standard input, one at a time), u2netp.onnx in its home folder;
- ours: `AiClient.remove_background_frames` with the frames as raw pixels (outputs cutout, naive),
  each answer's PNG written to a file (--format raw: its raw pixels, neither encoded by the server
  nor decoded here), against a `craftai serve` started here (u2netp set up; on
  --device cuda on --engine, torch by default) or --address.

With --recipe inspyrenet-swinb or birefnet-lite, ours serves a random-weight stand-in of the
published network (rembg is not run: it has neither); with --transparent-background (InSPyReNet),
transparent-background's video path runs the same frames with the same weights: its command's loop,
`Remover.process(frame, type="rgba")` one frame at a time, and ours asks estimated colours as its
rgba has.

With --stabilize W, ours also runs the frames twice for the matte alone, without and with
stabilize W: the flicker on still pixels (pipelines/matte_temporal.py `flicker`) and the frames/s
of each.

Reported for each: frames/s over the whole run (the command's start, the model's load, the frames)
and in the steady state (over the second half of the files written), and the alpha planes compared
(u2netp is the same network on both sides: the mattes must agree).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from craftai import AiClient
from tools.bench import harness
from tools.bench.cutout import _machine

REPO = Path(__file__).resolve().parents[2]


def made_frames(size: tuple[int, int], count: int) -> list[npt.NDArray[np.uint8]]:
    """A made clip's frames (moving subject, still background) as RGB arrays, as drawn."""
    from craftai_dev import clips

    return clips.moving_frames(size, count)


def steady(times: list[float]) -> float:
    """Frames a second over the second half of the files written (the first ones may come in a
    burst: frames that waited for the model's load)."""
    half = len(times) // 2
    span = times[-1] - times[half]
    return (len(times) - 1 - half) / span if span > 0 else 0.0


def run_rembg(frames: list[npt.NDArray[np.uint8]], work: Path) -> dict[str, Any]:
    """`rembg b` on the frames piped raw, as its users run it; the files' times give the steady rate."""
    from craftai_dev.files import u2netp_onnx

    home = work / "rembg-home"
    home.mkdir()
    shutil.copyfile(u2netp_onnx(), home / "u2netp.onnx")
    out = work / "rembg"
    out.mkdir()
    height, width = frames[0].shape[:2]
    rembg = Path(sys.executable).parent / "rembg"
    command = [str(rembg), "b", str(width), str(height), "-m", "u2netp", "-o", str(out / "%d.png")]
    env = {**os.environ, "U2NET_HOME": str(home), "NUMBA_DISABLE_JIT": "1"}
    started = time.time()
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert process.stdin is not None
    for frame in frames:
        process.stdin.write(np.ascontiguousarray(frame).tobytes())
    process.stdin.close()
    if process.wait(timeout=3600) != 0:
        raise SystemExit(f"rembg b failed (exit {process.returncode})")
    elapsed = time.time() - started
    files = sorted(out.glob("*.png"), key=lambda p: int(p.stem))
    if len(files) != len(frames):
        raise SystemExit(f"rembg b wrote {len(files)} files for {len(frames)} frames")
    times = [p.stat().st_mtime for p in files]
    return {
        "wall_s": elapsed,
        "frames_per_s": len(frames) / elapsed,
        "steady_frames_per_s": steady(times),
        "files": files,
    }


def run_ours(
    ai: AiClient,
    frames: list[npt.NDArray[np.uint8]],
    work: Path,
    in_flight: int | None,
    engine: str | None,
    *,
    image_format: str = "png",
    recipe: str = "u2netp",
    naive: bool = True,
) -> dict[str, Any]:
    """The frames through one stream; each answer's file (a PNG, or the raw pixels) written as it comes."""
    out = work / "ours"
    out.mkdir()
    times = []
    server_ms = []
    stages: dict[str, list[float]] = {}
    started = time.time()
    files = []
    device = ""
    for answer in ai.remove_background_frames(
        frames, outputs="cutout", naive=naive, in_flight=in_flight, recipe=recipe, engine=engine, format=image_format
    ):
        assert answer.output.cutout is not None
        path = out / f"{answer.index + 1}.{image_format}"
        path.write_bytes(answer.output.cutout.data)
        files.append(path)
        times.append(time.time())
        server_ms.append(answer.output.server_ms)
        for stage, ms in answer.output.timing_ms.items():
            stages.setdefault(stage, []).append(ms)
        device = answer.output.device
    elapsed = time.time() - started
    found = harness.percentiles(server_ms)
    return {
        "wall_s": elapsed,
        "frames_per_s": len(frames) / elapsed,
        "steady_frames_per_s": steady(times),
        "server_ms_p50": round(found["p50"], 1),
        "stages_ms_p50": {stage: round(harness.percentiles(ms)["p50"], 1) for stage, ms in stages.items()},
        "device": device,
        "files": files,
    }


def stability(
    ai: AiClient, frames: list[npt.NDArray[np.uint8]], weight: float, engine: str | None, recipe: str = "u2netp"
) -> dict[str, Any]:
    """The mattes' flicker on still pixels (pipelines/matte_temporal.py `flicker`) and the frames/s,
    without and with stabilize (outputs: the matte)."""
    from craftai_infer.pipelines import matte_temporal

    found: dict[str, Any] = {"weight": weight}
    for name, stabilize in (("plain", None), ("stabilized", weight)):
        started = time.time()
        mattes = [
            np.asarray(Image.open(io.BytesIO(f.output.matte.data)))
            for f in ai.remove_background_frames(
                frames, outputs="matte", recipe=recipe, engine=engine, stabilize=stabilize
            )
            if f.output.matte is not None
        ]
        elapsed = time.time() - started
        found[name] = {
            "flicker_levels": round(matte_temporal.flicker(mattes, frames), 3),
            "frames_per_s": round(len(frames) / elapsed, 2),
        }
    return found


def run_transparent_background(frames: list[npt.NDArray[np.uint8]], device: str) -> dict[str, Any]:
    """transparent-background's video path on the same frames: its command's loop, one frame at a
    time through `Remover.process(frame, type="rgba")` (its `base` mode, no TorchScript), with the
    same random InSPyReNet weights as ours (saved in its .pth layout); {"unavailable": why} where
    its package does not import or run."""
    import tempfile

    import torch
    from safetensors.torch import load_file

    from craftai_dev.inspyrenet_fixture import checkpoints

    try:
        from transparent_background import Remover
    except Exception as exc:
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    with tempfile.TemporaryDirectory(prefix="bench-frames-peer-") as folder:
        weights = Path(folder) / "inspyrenet.pth"
        torch.save(load_file(str(checkpoints()["random"].path)), weights)
        try:
            them = Remover(mode="base", jit=False, device=device, ckpt=str(weights))
            them.process(Image.fromarray(frames[0]), type="rgba")  # warm, as ours is set up before
            times = []
            started = time.time()
            for frame in frames:
                them.process(Image.fromarray(frame), type="rgba")
                times.append(time.time())
        except Exception as exc:
            return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    elapsed = time.time() - started
    return {"wall_s": elapsed, "frames_per_s": len(frames) / elapsed, "steady_frames_per_s": steady(times)}


def alpha_apart(ours: list[Path], theirs: list[Path]) -> int:
    """The most two alpha planes differ, over every frame."""
    worst = 0
    for a, b in zip(ours, theirs, strict=True):
        if a.suffix == ".raw":
            width, height = Image.open(b).size
            mine = np.frombuffer(a.read_bytes(), np.uint8).reshape(height, width, 4)[:, :, 3].astype(np.int16)
        else:
            mine = np.asarray(Image.open(a).convert("RGBA"))[:, :, 3].astype(np.int16)
        other = np.asarray(Image.open(b).convert("RGBA"))[:, :, 3]
        worst = max(worst, int(np.abs(mine - other).max()))
    return worst


def _size(text: str) -> tuple[int, int]:
    width, height = (int(v) for v in text.lower().split("x"))
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", type=_size, default=(1280, 720), help="the frames' WIDTHxHEIGHT (default 1280x720)")
    parser.add_argument("--frames", type=int, default=48, help="frames in the clip (default 48)")
    parser.add_argument("--in-flight", type=int, default=None, help="frames at work at once (default: the server's)")
    parser.add_argument("--address", help="a running server with u2netp set up (default: start one)")
    parser.add_argument("--device", default="cpu", help="the started server's CRAFTAI_DEVICE (cpu, cuda)")
    parser.add_argument("--engine", default="", help="u2netp's engine (default: the catalogue's; on a GPU: torch)")
    parser.add_argument("--no-rembg", action="store_true", help="ours only (rembg runs on the CPU only)")
    parser.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="u2netp",
        help="ours: u2netp (its real file; against rembg b), or a random-weight stand-in of the published "
        "network: inspyrenet-swinb, birefnet-lite (GPU figures; rembg is not run for them)",
    )
    parser.add_argument(
        "--transparent-background",
        action="store_true",
        help="with inspyrenet-swinb: transparent-background's video path on the same frames and weights, and "
        "ours with estimated colours as its rgba output has",
    )
    parser.add_argument(
        "--format",
        choices=("png", "raw"),
        default="png",
        help="our cutouts' format: png (rembg b's work) or raw (the pixels: no encode there nor here)",
    )
    parser.add_argument(
        "--stabilize", type=float, default=None, metavar="W", help="also: the flicker and frames/s with stabilize W"
    )
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "frames.json", help="the JSON file")
    args = parser.parse_args(argv)
    if args.frames < 2:
        parser.error("--frames must be at least 2 (the steady rate is between the first and the last)")
    if not args.engine and args.device.startswith("cuda"):
        args.engine = "torch"
    if args.recipe != "u2netp":
        args.no_rembg = True  # rembg's u2netp only: the other recipes' peers are named below
    if args.transparent_background and args.recipe != "inspyrenet-swinb":
        parser.error("--transparent-background compares inspyrenet-swinb (--recipe inspyrenet-swinb)")
    machine = _machine()
    began = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    with harness.scratch("bench-frames-") as work:
        frames = made_frames(args.size, args.frames)
        print(f"== {len(frames)} frames of {args.size[0]}x{args.size[1]}", flush=True)
        theirs = None if args.no_rembg else run_rembg(frames, work)
        if theirs is not None:
            print(f"   rembg b: {theirs['frames_per_s']:.2f} frames/s ({theirs['steady_frames_per_s']:.2f} steady)")
        peer = run_transparent_background(frames, args.device) if args.transparent_background else None
        if peer is not None:
            print(f"   transparent-background: {peer}")
        ours = _ours(args, frames, work)
        rates = f"{ours['frames_per_s']:.2f} frames/s ({ours['steady_frames_per_s']:.2f} steady)"
        print(f"   ours: {rates} on {ours['device']}; server p50 {ours['server_ms_p50']} ms: {ours['stages_ms_p50']}")
        apart = None if theirs is None else alpha_apart(ours["files"], theirs["files"])
    report: dict[str, Any] = {
        "benchmark": "frames",
        "date": began,
        "command": " ".join(["tools/bench/frames.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "settings": {
            "size": f"{args.size[0]}x{args.size[1]}",
            "frames": args.frames,
            "in_flight": args.in_flight,
            "format": args.format,
            "recipe": args.recipe,
            "naive": not args.transparent_background,
        },
        "ours": {k: v for k, v in ours.items() if k not in ("files", "stability")},
        "rembg": None if theirs is None else {k: v for k, v in theirs.items() if k != "files"},
        "alpha_most_apart": apart,
        "stability": ours.get("stability"),
        "transparent_background": peer,
    }
    if peer is not None and "frames_per_s" in peer:
        report["ratio_transparent_background"] = round(ours["frames_per_s"] / peer["frames_per_s"], 3)
    if theirs is not None:
        for key in ("frames_per_s", "steady_frames_per_s"):
            report[f"ratio_{key}"] = round(ours[key] / theirs[key], 3) if theirs[key] else None
        print(
            f"   ours / rembg: {report['ratio_frames_per_s']}x whole, {report['ratio_steady_frames_per_s']}x steady; "
            f"alpha at most {apart} apart"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}")
    return 0


def _ours(args: argparse.Namespace, frames: list[npt.NDArray[np.uint8]], work: Path) -> dict[str, Any]:
    engine = args.engine or None

    def measured(ai: AiClient) -> dict[str, Any]:
        naive = not args.transparent_background
        found = run_ours(
            ai, frames, work, args.in_flight, engine, image_format=args.format, recipe=args.recipe, naive=naive
        )
        if args.stabilize is not None:
            found["stability"] = stability(ai, frames, args.stabilize, engine, args.recipe)
            print(f"   stability: {found['stability']}")
        return found

    if args.address:
        with AiClient(app_id="bench-frames", target=args.address) as ai:
            return measured(ai)
    with _served(args.recipe, work, args.device) as address, AiClient(app_id="bench-frames", target=address) as ai:
        list(ai.setup("image.matte", args.recipe, engine))
        return measured(ai)


@contextlib.contextmanager
def _served(recipe: str, work: Path, device: str) -> Iterator[str]:
    """A `craftai serve` with `recipe` to set up: u2netp's real file, or a stand-in checkpoint
    served on loopback through a recipes file (RECIPES)."""
    env = {"CRAFTAI_DEVICE": device}
    if recipe == "u2netp":
        from craftai_dev.files import u2netp_onnx

        with harness.serve_u2netp_cpu(work / "server", u2netp_onnx(), env) as address:
            yield address
        return
    made = RECIPES[recipe]()
    files = work / "files"
    files.mkdir()
    (files / made.path.name).symlink_to(made.path)
    with harness.files_on_loopback(files) as url:
        pin = {"size": made.pin.size, "sha256": made.pin.sha256, "url": f"{url}/{made.path.name}"}
        recipes = harness.pinned_catalogue(work / "recipes.toml", {recipe: {"weights": pin}})
        with harness.serve(work, {**env, "CRAFTAI_RECIPES": str(recipes)}) as address:
            yield address


def _inspyrenet() -> Any:
    from craftai_dev.inspyrenet_fixture import checkpoints

    return checkpoints()["random"]


def _birefnet_lite() -> Any:
    from craftai_dev.birefnet_fixture import checkpoints

    return checkpoints()["random"]


RECIPES: dict[str, Callable[[], Any]] = {
    "u2netp": lambda: None,
    "inspyrenet-swinb": _inspyrenet,
    "birefnet-lite": _birefnet_lite,
}


if __name__ == "__main__":
    sys.exit(main())
