"""Foreground colour estimation (craftai_infer.pipelines.foreground) against pymatting's
`estimate_foreground_ml`, the reference implementation of the same method (test-only dependency).

On a synthetic composite with a known foreground, background and hair-like alpha
(craftai_dev.hair), the error of each estimate against the true foreground is measured where
it shows (mean |α (F̂ − F)| over the partial pixels, in 8-bit levels): ours is pymatting's within
ERROR_MARGIN, and far below the naive cutout's (the picture's own colours). On a real photo with
u2netp's real matte, ours equals pymatting's within the stated tolerances: the two sweep the
pixels in another order (red–black here, raster there: docs/MATTE.md), which moves a few pixels of
faint alpha, where the foreground is barely determined, by more.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev import hair
from craftai_infer.pipelines.foreground import estimate_foreground
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx

ERROR_MARGIN = 0.25  # 8-bit levels of |α (F̂ − F)| above pymatting's
NAIVE_SHARE = 0.7  # at most this share of the naive cutout's error
REAL_MEAN = 1.0  # mean |F_ours − F_pymatting| over the visible pixels (α > 0), 8-bit levels
REAL_WEIGHTED_P99 = 3.0  # 99th percentile of α |F_ours − F_pymatting| there


@pytest.fixture(scope="module")
def pymatting_ml() -> Any:
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")
    from pymatting import estimate_foreground_ml  # type: ignore[import-untyped]

    return estimate_foreground_ml


def _ours(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None]
    a = torch.from_numpy(np.ascontiguousarray(alpha))[None, None]
    out: np.ndarray = estimate_foreground(x, a)[0].permute(1, 2, 0).numpy()
    return out


@pytest.mark.parametrize(("fg", "bg", "seed"), [("chelsea.png", "coffee.png", 0), ("astronaut.png", "rocket.jpg", 1)])
def test_the_estimate_is_as_good_as_pymattings_on_a_known_foreground(
    photos: dict[str, Path], pymatting_ml: Any, fg: str, bg: str, seed: int
) -> None:
    case = hair.case(Image.open(photos[fg]), Image.open(photos[bg]), 240, 180, seed)
    naive, theirs, ours = (
        case.error(case.image),
        case.error(pymatting_ml(case.image, case.alpha)),
        case.error(_ours(case.image, case.alpha)),
    )
    print(f"{fg} over {bg}: error naive {naive:.3f}, pymatting {theirs:.3f}, ours {ours:.3f} (8-bit levels)")
    assert ours <= theirs + ERROR_MARGIN
    assert ours <= NAIVE_SHARE * naive


def test_on_a_real_photo_with_u2netps_matte_the_estimate_is_pymattings(
    photos: dict[str, Path], pymatting_ml: Any, u2netp_file: Path
) -> None:
    picture = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))
    route = U2netpOnnx(RouteFiles({"network": u2netp_file}, None, 2), "cpu")
    (matte,) = route.matte([picture])
    image = picture.astype(np.float32) / np.float32(255.0)
    alpha = matte.astype(np.float32) / np.float32(255.0)
    ours = np.floor(_ours(image, alpha) * 255 + 0.5)
    theirs = np.floor(pymatting_ml(image, alpha) * 255 + 0.5)
    visible = alpha > 0
    diff = np.abs(ours - theirs)[visible]
    weighted = (np.abs(ours - theirs) * alpha[:, :, None])[visible]
    partial = (alpha > 0) & (alpha < 1)
    print(
        f"chelsea, u2netp matte ({partial.sum()} partial pixels): |ours - pymatting| mean {diff.mean():.3f}, "
        f"max {diff.max():.0f}; alpha-weighted p99 {np.percentile(weighted, 99):.2f}"
    )
    assert partial.sum() > 1000  # a real matte with soft edges, not a saturated one
    assert diff.mean() <= REAL_MEAN and np.percentile(weighted, 99) <= REAL_WEIGHTED_P99
