"""PNG encoding of a large matte and cutout: zlib against ISA-L (craftai_infer.encodings), on this machine.

    .venv/bin/python -m tools.bench.png_encode [--size 4000x3000] [--rounds 7] [--tiny]

The matte is the real u2netp's matte of the astronaut photo enlarged to --size (smooth, as real
mattes are), the cutout the photo with it as alpha. Each encoder runs once per round, in turn (the
order rotated), and its time's ratio to zlib level 1's in the same round is taken: the median of
those ratios is reported, with each one's median milliseconds and file size (CPU figures on a shared
machine: read the ratios). Every file is checked to decode to the same pixels.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt


def pictures(size: tuple[int, int]) -> dict[str, npt.NDArray[np.uint8]]:
    from PIL import Image

    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp
    from craftai_models.onnx_sessions import open_session

    photo = np.asarray(Image.open(photos()["astronaut.png"]).convert("RGB"))
    session = open_session(u2netp_onnx(), "cpu")
    fused = session.run(None, {session.get_inputs()[0].name: matte_u2netp.preprocess(photo)})[0]
    matte = matte_u2netp.postprocess(fused, size)
    rgb = np.asarray(Image.fromarray(photo).resize(size, Image.Resampling.BICUBIC))
    return {"matte (grey)": matte, "cutout (RGBA)": np.dstack([rgb, matte])}


def main(argv: list[str] | None = None) -> int:
    from PIL import Image

    from craftai_infer import encodings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="4000x3000")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tiny", action="store_true", help="a small picture, one round")
    options = parser.parse_args(argv)
    w, h = (200, 150) if options.tiny else tuple(int(v) for v in options.size.split("x"))
    rounds = 1 if options.tiny else options.rounds
    cores = 2
    pool = ThreadPoolExecutor(cores)

    def zlib_png(pixels: npt.NDArray[np.uint8], bands: int) -> bytes:
        saved = encodings.ISAL_LEVELS
        encodings.ISAL_LEVELS = range(0)  # every level zlib's: the encoder before ISA-L
        try:
            return encodings.png(pixels, 1, pool, bands)
        finally:
            encodings.ISAL_LEVELS = saved

    def pillow(pixels: npt.NDArray[np.uint8], level: int) -> bytes:
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="PNG", compress_level=level)
        return out.getvalue()

    encoders: dict[str, Callable[[npt.NDArray[np.uint8]], bytes]] = {
        "zlib level 1, 1 band (reference)": lambda p: zlib_png(p, 1),
        f"zlib level 1, {cores} bands (before)": lambda p: zlib_png(p, cores),
        "ISA-L level 1, 1 band": lambda p: encodings.png(p, 1, pool, 1),
        f"ISA-L level 1, {cores} bands (now)": lambda p: encodings.png(p, 1, pool, cores),
        "Pillow level 6 (rembg's default save)": lambda p: pillow(p, 6),
    }
    lines = [f"PNG encode at {w}x{h}, {rounds} interleaved rounds, {cores} threads for bands", ""]
    lines += ["| picture | encoder | median ms | time vs the reference (median of rounds) | bytes |"]
    lines += ["|---|---|---|---|---|"]
    for label, pixels in pictures((w, h)).items():
        names = list(encoders)
        ms: dict[str, list[float]] = {n: [] for n in names}
        sizes: dict[str, int] = {}
        for n in names:
            data = encoders[n](pixels)
            sizes[n] = len(data)
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), pixels), n
            assert zlib.crc32(data[-8:-4]) == zlib.crc32(b"IEND")
        for r in range(rounds):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                started = time.perf_counter()
                encoders[n](pixels)
                ms[n].append((time.perf_counter() - started) * 1000)
        reference = names[0]
        for n in names:
            ratio = statistics.median(a / b for a, b in zip(ms[n], ms[reference], strict=True))
            lines.append(f"| {label} | {n} | {statistics.median(ms[n]):.1f} | {ratio:.2f} | {sizes[n]:,} |")
    pool.shutdown()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
