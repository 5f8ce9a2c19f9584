"""Choose the cutout's foreground colour estimation by measurement: the multi-level method
(Germer et al., ICPR 2020; ours, craftai_infer.pipelines.foreground, and pymatting's
`estimate_foreground_ml`) against the blur-fusion estimate (Forte and Pitié, "Approximate Fast
Foreground Colour Estimation", ICIP 2021) and the naive cutout, on synthetic composites with a
known foreground, background and hair-like alpha (tests/support/hair.py).

    .venv/bin/python tools/foreground_study.py [--sizes 240x180,640x480,1024x768] [--repeats 3]

Error: mean |α (F̂ − F)| over the partial pixels, 8-bit levels (what the cutout shows wrong).
Time: the median of --repeats on this machine's CPU, relative to ours (ratios only: a shared CPU).
docs/MATTE.md quotes a run. Blur fusion is written here from the paper (it is not served).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
for src in ("services/infer/src", "services/models/src", "services/common/src", "clients/wire/src", "."):
    if str(REPO / src) not in sys.path:
        sys.path.insert(0, str(REPO / src))

from craftai_infer.pipelines.foreground import estimate_foreground  # noqa: E402
from craftai_infer.pipelines.guided_filter import box_mean  # noqa: E402

Estimate = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (H, W, 3) image, (H, W) alpha -> (H, W, 3) F


def blur_fusion(image: torch.Tensor, alpha: torch.Tensor, first: int = 90, second: int = 6) -> torch.Tensor:
    """Forte and Pitié's two passes, boxes of width `first` then `second` (their values):
    F = F̄ + α (I − α F̄ − (1 − α) B̄), with F̄ = blur(F α) / blur(α) and B̄ = blur(B (1 − α)) / blur(1 − α);
    the first pass from F = B = I, the second from the first's F and B̄. (1, 3, H, W), (1, 1, H, W)."""

    def one(fg: torch.Tensor, bg: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = width // 2
        blurred_alpha = box_mean(alpha, r)
        f_bar = box_mean(fg * alpha, r) / (blurred_alpha + 1e-5)
        b_bar = box_mean(bg * (1 - alpha), r) / ((1 - blurred_alpha) + 1e-5)
        return (f_bar + alpha * (image - alpha * f_bar - (1 - alpha) * b_bar)).clamp(0, 1), b_bar

    fg, bg = one(image, image, first)
    return one(fg, bg, second)[0]


def _torch(method: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Estimate:
    def run(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None]
        a = torch.from_numpy(np.ascontiguousarray(alpha))[None, None]
        out: np.ndarray = method(x, a)[0].permute(1, 2, 0).numpy()
        return out

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="240x180,640x480,1024x768")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (pymatting's method runs on one)")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(options.threads))
    from PIL import Image
    from pymatting import estimate_foreground_ml  # type: ignore[import-untyped]

    from tests.support import hair
    from tools.samples import photos

    found = photos()
    methods: dict[str, Estimate] = {
        "naive (the picture's colours)": lambda image, _alpha: image,
        "blur fusion (Forte & Pitié 2021)": _torch(blur_fusion),
        "multi-level, pymatting (numba)": lambda image, alpha: np.asarray(estimate_foreground_ml(image, alpha)),
        "multi-level, ours (torch, red-black)": _torch(estimate_foreground),
    }
    pairs = [("chelsea.png", "coffee.png"), ("astronaut.png", "rocket.jpg")]
    print("| size | case | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    times: dict[str, list[float]] = {name: [] for name in methods}
    for size in options.sizes.split(","):
        width, height = (int(v) for v in size.split("x"))
        for seed, (fg, bg) in enumerate(pairs):
            case = hair.case(Image.open(found[fg]), Image.open(found[bg]), width, height, seed)
            errors = []
            for name, method in methods.items():
                method(case.image[:32, :32], case.alpha[:32, :32])  # compiled / warmed up
                samples = []
                for _ in range(options.repeats):
                    started = time.perf_counter()
                    estimate = method(case.image, case.alpha)
                    samples.append(time.perf_counter() - started)
                times[name].append(statistics.median(samples))
                errors.append(f"{case.error(estimate):.3f}")
            print(f"| {size} | {fg.split('.')[0]} over {bg.split('.')[0]} | " + " | ".join(errors) + " |")
    ours = times["multi-level, ours (torch, red-black)"]
    print()
    print("| method | time relative to ours (median over the cases) |")
    print("|---|---|")
    for name, measured in times.items():
        print(f"| {name} | {statistics.median(m / o for m, o in zip(measured, ours, strict=True)):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
