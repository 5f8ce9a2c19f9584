"""What a picture costs on its way in: the app's encoding of its pixels and the server's decode,
for each way of sending them (craftai.pictures, craftai_infer.pictures), on this machine.

    .venv/bin/python -m tools.bench.picture_input [--sizes 1024x768,2048x1536] [--rounds 7]

The picture is the astronaut photo enlarged to each size. Ways: a PNG as Pillow writes it by
default (level 6: what an app that saved the picture sends), a PNG at level 1, a JPEG at quality
95 (lossy: other pixels, for reference), and the pixels as the SDK sends an array (binary PPM).
Each way runs once per round, in turn; the medians are reported with the bytes sent, and every
lossless way is checked to give the server the app's pixels (CPU figures on a shared machine:
compare the rows of one run).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt


def _pillow(fmt: str, **options: int) -> Callable[[npt.NDArray[np.uint8]], bytes]:
    from PIL import Image

    def encode(pixels: npt.NDArray[np.uint8]) -> bytes:
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format=fmt, **options)
        return out.getvalue()

    return encode


def main(argv: list[str] | None = None) -> int:
    from PIL import Image

    from craftai.pictures import read_picture
    from craftai_dev.samples import photos
    from craftai_infer import pictures
    from tools.bench import harness

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024x768,2048x1536")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="also write picture_input.json/.md there")
    options = parser.parse_args(argv)
    ways: dict[str, tuple[Callable[[npt.NDArray[np.uint8]], bytes], bool]] = {
        "PNG, Pillow's default (level 6)": (_pillow("PNG"), True),
        "PNG, level 1": (_pillow("PNG", compress_level=1), True),
        "JPEG, quality 95 (lossy)": (_pillow("JPEG", quality=95), False),
        "the array as the SDK sends it (binary PPM)": (read_picture, True),
    }
    limits = pictures.Limits(max_pixels=100_000_000, max_side=20_000)
    photo = Image.open(photos()["astronaut.png"]).convert("RGB")
    results: dict[str, dict[str, dict[str, float]]] = {}
    rows = []
    for size in options.sizes.split(","):
        w, h = (int(v) for v in size.split("x"))
        pixels = np.asarray(photo.resize((w, h), Image.Resampling.BICUBIC))
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ways}
        sent: dict[str, bytes] = {}
        for r in range(options.rounds):
            names = list(ways)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                encode, lossless = ways[name]
                started = time.perf_counter()
                data = encode(pixels)
                encoded = time.perf_counter()
                decoded = pictures.decode(data, limits)
                times[name][0].append((encoded - started) * 1000)
                times[name][1].append((time.perf_counter() - encoded) * 1000)
                if lossless and not np.array_equal(decoded, pixels):
                    raise SystemExit(f"{name}: the server's pixels are not the app's")
                sent[name] = data
        results[size] = {}
        for name, (enc, dec) in times.items():
            e, d = statistics.median(enc), statistics.median(dec)
            results[size][name] = {"encode_ms": e, "decode_ms": d, "bytes": len(sent[name])}
            rows.append(f"| {size} | {name} | {e:.1f} | {d:.2f} | {len(sent[name]):,} |")
    table = "\n".join(
        [
            f"Picture input, {options.rounds} rounds, medians",
            "",
            "| picture | sent as | app: encode ms | server: decode ms | bytes |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)
        harness.write_report(options.out, "picture_input", results, table)
    else:
        print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
