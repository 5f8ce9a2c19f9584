"""JPEG decode on the GPU (nvJPEG through torchvision.io) against the service's CPU decode
(simplejpeg, libjpeg-turbo, strict), for issue 19's large pictures (STEPS=jpeg).

    python3 -m tools.gpu.jpeg_decode --out DIR

Pictures: the astronaut photo enlarged to 1280x960, 2048x1536 and 4000x3000, saved by Pillow at
quality 92 (4:2:0, what tools/bench/run.py sends through gRPC). For each: the CPU decode alone and
with the upload of its pixels from page-locked memory (what a GPU route gets today), the GPU decode
of the file's bytes (the bytes' upload and the device synchronised: as a route would wait for it),
one picture at a time and from four threads at once (does it leave the GIL and run beside
itself?), and the pixels' difference to libjpeg-turbo's (largest and mean absolute, the share off
by more than 2). Writes jpeg_decode.json and jpeg_decode.md into --out.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import torch

from tools.bench import harness
from tools.bench.harness import jpeg

SIZES = [(1280, 960), (2048, 1536), (4000, 3000)]
REPS = 20
THREADS = 4


def timed(fn: Any, reps: int = REPS) -> dict[str, float]:
    return harness.percentiles(harness.timed_ms(fn, reps, 3))


def threads(fn: Any) -> float:
    """Pictures/s of THREADS threads each decoding 5 pictures."""
    with ThreadPoolExecutor(THREADS) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _k: [fn() for _ in range(5)], range(THREADS)))
        return THREADS * 5 / (time.perf_counter() - started)


def measure(width: int, height: int, device: torch.device) -> dict[str, Any]:
    from torchvision.io import ImageReadMode, decode_jpeg

    data = jpeg((width, height))
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    pinned = encoded.pin_memory()
    cpu = simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)
    staging = torch.empty(cpu.shape, dtype=torch.uint8).pin_memory()

    def cpu_decode() -> None:
        simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)

    def cpu_decode_upload() -> None:
        staging.numpy()[...] = simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)
        staging.to(device, non_blocking=True)
        torch.cuda.synchronize()

    def gpu_decode(source: torch.Tensor = encoded) -> torch.Tensor:
        out: torch.Tensor = decode_jpeg(source, mode=ImageReadMode.RGB, device=device)
        torch.cuda.synchronize()
        return out

    on_gpu = gpu_decode().permute(1, 2, 0).cpu().numpy()
    diff = np.abs(on_gpu.astype(np.int16) - cpu.astype(np.int16))
    return {
        "bytes": len(data),
        "cpu_decode_ms": timed(cpu_decode),
        "cpu_decode_and_upload_ms": timed(cpu_decode_upload),
        "gpu_decode_ms": timed(gpu_decode),
        "gpu_decode_from_pinned_ms": timed(lambda: gpu_decode(pinned)),
        "cpu_pictures_per_s_4_threads": threads(cpu_decode),
        "gpu_pictures_per_s_4_threads": threads(gpu_decode),
        "max_abs_diff": int(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "share_off_by_more_than_2": float((diff > 2).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/gpu/jpeg"))
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    import torchvision

    device = torch.device("cuda")
    results: dict[str, Any] = {"torch": torch.__version__, "torchvision": torchvision.__version__}
    rows = []
    for width, height in SIZES:
        size = f"{width}x{height}"
        r = results[size] = measure(width, height, device)
        cells = [
            f"{r['bytes']:,}",
            *(f"{r[k]['p50']:.2f}" for k in ("cpu_decode_ms", "cpu_decode_and_upload_ms", "gpu_decode_ms")),
            f"{r['gpu_decode_from_pinned_ms']['p50']:.2f}",
            f"{r['cpu_pictures_per_s_4_threads']:.0f}",
            f"{r['gpu_pictures_per_s_4_threads']:.0f}",
            f"{r['max_abs_diff']} / {r['mean_abs_diff']:.3f} / {r['share_off_by_more_than_2']:.2e}",
        ]
        rows.append(f"| {size} | {' | '.join(cells)} |")
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"JPEG decode, {torch.cuda.get_device_name()}, torch {torch.__version__}, torchvision "
            f"{results['torchvision']}; ms are p50 of {REPS}",
            "",
            "| picture | bytes | CPU (simplejpeg) ms | CPU + upload (pinned) ms | GPU (nvJPEG) ms | GPU from pinned "
            f"bytes ms | CPU pictures/s ({THREADS} threads) | GPU pictures/s ({THREADS} threads) | pixels vs "
            "libjpeg-turbo: max / mean abs diff / share > 2 |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    harness.write_report(options.out, "jpeg_decode", results, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
