"""How picture decoding scales with threads in one process (the GIL question behind the SAM
encoder's throughput through gRPC, docs/PERFORMANCE.md).

    python -m tools.bench.decode_threads [--seconds 3] [--threads 1 4 8 16]

A 2048x1536 JPEG (a sample photo, enlarged) is decoded to an RGB uint8 array by each variant in
N threads for a few seconds; pictures/s per N is printed. A variant that holds the GIL stops
scaling early; one that releases it scales with the cores.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from craftai_dev.samples import photos
from craftai_infer import pictures
from craftai_infer.pipelines.picture_convert import to_rgb_uint8


def variants(data: bytes) -> dict[str, Callable[[], np.ndarray]]:
    limits = pictures.Limits(max_pixels=50_000_000, max_side=16_384)
    found: dict[str, Callable[[], np.ndarray]] = {
        "service (pictures.decode_rgb)": lambda: pictures.decode_rgb(data, limits),
        "Pillow (the service's Pillow path: to_rgb_uint8)": lambda: to_rgb_uint8(Image.open(io.BytesIO(data))),
        "Pillow open + load only": lambda: _pillow_load(data),
    }
    try:
        import cv2

        buffer = np.frombuffer(data, np.uint8)

        def opencv() -> np.ndarray:
            bgr = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
            assert bgr is not None
            return np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))

        found["OpenCV imdecode + BGR->RGB (for comparison)"] = opencv
    except ImportError:
        pass
    return found


def _pillow_load(data: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    image.load()
    return np.empty(0, np.uint8)


def rate(fn: Callable[[], object], threads: int, seconds: float) -> float:
    deadline = time.perf_counter() + seconds

    def loop() -> int:
        done = 0
        while time.perf_counter() < deadline:
            fn()
            done += 1
        return done

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(lambda _: loop(), range(threads)))
    return total / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 8, 16])
    options = parser.parse_args(argv)
    picture = Image.open(photos()["astronaut.png"]).convert("RGB").resize((2048, 1536), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=90)
    data = out.getvalue()
    found = variants(data)
    reference = next(iter(found.values()))()
    for name, fn in found.items():
        result = fn()
        same = "" if result.size == 0 else f", same pixels as the service: {np.array_equal(result, reference)}"
        rates = ", ".join(f"{n} threads {rate(fn, n, options.seconds):.0f}/s" for n in options.threads)
        print(f"{name}: {rates}{same}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
