"""The cutout's foreground colours on CUDA: pymatting's raster order (the anti-diagonal wavefront of
pipelines/foreground.py) with each level's steps in one Triton launch (pipelines/foreground_kernel.py,
split between 1 to 32 blocks) or launched step by step from the host, against the red-black sweep
(tools/gpu/foreground_sweep.py, what GPU routes ran before), all as a GPU route runs them (the
levels up to 32 px on the CPU), at four sizes (STEPS=foreground).

    python3 -m tools.gpu.foreground_order --out DIR

The picture: the astronaut photo resized, its matte a soft disc with a ramp of partial alpha a
tenth of the side wide (the estimation's work does not depend on the matte's content, only on its
size). For each size and variant: the median of `--reps` runs (the device synchronised); each
kernel's largest difference to the one-block kernel (the same arithmetic: it must be 0, or the
blocks race) and to the wavefront on the CPU in 8-bit levels (rounding: at most 1). Writes
foreground_order.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from craftai_dev.files import sample_photo
from craftai_infer.pipelines import foreground_kernel
from craftai_infer.pipelines.foreground import estimate_foreground
from tools.gpu import foreground_sweep

SIZES = [(451, 300), (1024, 768), (2048, 1536), (4000, 3000)]
PROGRAMS = (1, 4, 8, 16, 32)
PROGRAMS_DEFAULT = foreground_kernel.PROGRAMS
CPU = torch.device("cpu")


def inputs(width: int, height: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    picture = np.asarray(Image.open(sample_photo("astronaut.png")).convert("RGB").resize((width, height)))
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    radius = np.hypot((xx - width / 2) / width, (yy - height / 2) / height)
    matte = np.clip((0.35 - radius) / 0.1, 0.0, 1.0)
    image = torch.from_numpy(picture.copy()).permute(2, 0, 1)[None].to(device)
    alpha = torch.from_numpy((matte * 255).round().astype(np.uint8))[None, None].to(device)
    return image, alpha


def median_ms(fn: Any, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def measure(width: int, height: int, reps: int, host_steps_large: bool) -> dict[str, Any]:
    image, alpha = inputs(width, height, torch.device("cuda"))

    def wavefront(programs: int) -> torch.Tensor:
        foreground_kernel.PROGRAMS = programs
        return estimate_foreground(image, alpha, coarse_device=CPU)

    row: dict[str, Any] = {"size": f"{width}x{height}"}
    image_f, alpha_f = image.float() / 255.0, alpha.float() / 255.0  # the sweep takes floats
    row["sweep_ms"] = median_ms(lambda: foreground_sweep.estimate_foreground(image_f, alpha_f, coarse_device=CPU), reps)
    one = wavefront(1)
    on_cpu = estimate_foreground(image.cpu(), alpha.cpu()) if width * height <= 2048 * 1536 else None
    for programs in PROGRAMS:
        found = wavefront(programs)
        row[f"kernel{programs}_vs_one_max"] = float((found - one).abs().max())
        if on_cpu is not None:
            levels = (torch.floor(found.cpu() * 255 + 0.5) - torch.floor(on_cpu * 255 + 0.5)).abs()
            row[f"kernel{programs}_vs_cpu_levels_max"] = float(levels.max())
            row[f"kernel{programs}_vs_cpu_levels_mean"] = float(levels.mean())
        row[f"kernel{programs}_ms"] = median_ms(lambda p=programs: wavefront(p), reps)
    foreground_kernel.PROGRAMS = PROGRAMS_DEFAULT
    if width * height <= 2048 * 1536 or host_steps_large:
        runs_on = foreground_kernel.runs_on
        foreground_kernel.runs_on = lambda device: False  # the host-launched steps
        try:
            row["host_steps_ms"] = median_ms(lambda: estimate_foreground(image, alpha, coarse_device=CPU), 1)
        finally:
            foreground_kernel.runs_on = runs_on
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--host-steps-large", action="store_true", help="time the host-launched steps at 4000x3000 too")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    image, alpha = inputs(64, 48, torch.device("cuda"))
    started = time.perf_counter()
    estimate_foreground(image, alpha, coarse_device=CPU)  # Triton compiles the kernel (or loads its cache)
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - started) * 1e3
    print(f"the first call of the process (the kernel compiled or loaded): {first_ms:.0f} ms", flush=True)
    rows = []
    for width, height in SIZES:
        rows.append(measure(width, height, args.reps, args.host_steps_large))
        print(json.dumps(rows[-1]), flush=True)
    found = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "first_ms": first_ms, "rows": rows}
    (args.out / "foreground_order.json").write_text(json.dumps(found, indent=2) + "\n")
    print(f"\n{found['device']}, torch {found['torch']}, medians of {args.reps}; first call {first_ms:.0f} ms")
    kernels = " | ".join(f"kernel x{p}, ms" for p in PROGRAMS)
    print(f"| picture | red-black sweep, ms | host-launched steps, ms | {kernels} | x{PROGRAMS[-1]} vs x1 |")
    for row in rows:
        times = " | ".join(f"{row[f'kernel{p}_ms']:.1f}" for p in PROGRAMS)
        host = f"{row['host_steps_ms']:.1f}" if "host_steps_ms" in row else "-"
        race = max(row[f"kernel{p}_vs_one_max"] for p in PROGRAMS)
        print(f"| {row['size']} | {row['sweep_ms']:.1f} | {host} | {times} | {race:.2g} |")


if __name__ == "__main__":
    main()
