"""Foreground colour estimation (craftai_infer.pipelines.foreground) against pymatting's
`estimate_foreground_ml`, the reference implementation of the same method (test-only dependency),
at the defaults of both.

The two compute the same answer (pymatting's raster order, here as an anti-diagonal wavefront:
docs/MATTE.md) and differ by float32 rounding only, so the bounds are the project's limit (a mean
|F_ours − F_pymatting| of at most 1 level in 8 bits, over the partial pixels and over the visible
ones) and what rounding allows (no pixel, visible or not, more than 1 level off). The red–black
order served before met neither: 0.2 to 4.1 levels on average and up to 41 levels at a pixel on
these photos.

Photos (scikit-image's public-domain samples, craftai_dev.samples) with u2netp's real matte: fur
(chelsea), hair (astronaut), hard edges (coffee), thin hard edges (rocket), and composed from them:
large (rocket enlarged three times), small (chelsea reduced four times), a portrait (coffee turned:
the layout's other orientation). Each is compared as the service serves it (the cutout's colours,
`render` on the CPU, from the 8-bit picture and matte) and as the estimate itself (float32). The
GPU path is the same code on CUDA with its coarse levels on the CPU: tests/gpu/test_matte_outputs_gpu.py.

On synthetic composites with a known foreground (craftai_dev.hair: hair-like alpha), the error of
each estimate against the true foreground is measured where it shows (mean |α (F̂ − F)| over the
partial pixels, in 8-bit levels): ours is pymatting's within ERROR_MARGIN, and far below the naive
cutout's (the picture's own colours). Small random pictures of every shape from 1 × 1 (hypothesis)
check the borders and both orientations.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from craftai_dev import hair, pymatting_reference
from craftai_infer.pipelines.foreground import estimate_foreground
from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_spec import OutputsSpec
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx

ERROR_MARGIN = 0.25  # 8-bit levels of |α (F̂ − F)| above pymatting's
NAIVE_SHARE = 0.7  # at most this share of the naive cutout's error
LIMIT = 1.0  # the project's limit: mean |F_ours − F_pymatting| in 8-bit levels (partial, visible pixels)
ROUNDING = 1  # the largest |F_ours − F_pymatting| at any pixel, in 8-bit levels: float32 rounding
REAL_WEIGHTED_P99 = 3.0  # 99th percentile of α |F_ours − F_pymatting| over the visible pixels
U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]


def _resized(name: str, scale: float) -> Callable[[dict[str, Path]], U8]:
    def make(photos: dict[str, Path]) -> U8:
        photo = Image.open(photos[name]).convert("RGB")
        size = (round(photo.width * scale), round(photo.height * scale))
        kind = Image.Resampling.BICUBIC if scale > 1 else Image.Resampling.LANCZOS
        return np.asarray(photo.resize(size, kind))

    return make


def _turned(name: str) -> Callable[[dict[str, Path]], U8]:
    def make(photos: dict[str, Path]) -> U8:
        return np.ascontiguousarray(np.rot90(np.asarray(Image.open(photos[name]).convert("RGB"))))

    return make


PHOTOS: dict[str, Callable[[dict[str, Path]], U8]] = {
    "fur: chelsea 451x300": _resized("chelsea.png", 1),
    "hair: astronaut 512x512": _resized("astronaut.png", 1),
    "hard edges: coffee 600x400": _resized("coffee.png", 1),
    "thin hard edges: rocket 640x427": _resized("rocket.jpg", 1),
    "large: rocket enlarged to 1920x1281": _resized("rocket.jpg", 3),
    "small: chelsea reduced to 113x75": _resized("chelsea.png", 0.25),
    "portrait: coffee turned, 400x600": _turned("coffee.png"),
}


@pytest.fixture(scope="module")
def pymatting_ml() -> Any:
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")
    return pymatting_reference.estimate_foreground_ml()  # its module alone: the rest of pymatting not compiled


@pytest.fixture(scope="module")
def u2netp(u2netp_file: Path) -> U2netpOnnx:
    return U2netpOnnx(RouteFiles({"network": u2netp_file}, None, 2), "cpu")


def _ours(image: F32, alpha: F32) -> F32:
    x = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None]
    a = torch.from_numpy(np.ascontiguousarray(alpha))[None, None]
    out: F32 = estimate_foreground(x, a)[0].permute(1, 2, 0).numpy()
    return out


def _levels(x: F32) -> F32:
    """8-bit levels, rounded half up as the cutout rounds."""
    levels: F32 = np.floor(x * np.float32(255) + np.float32(0.5))
    return levels


@pytest.mark.parametrize(("fg", "bg", "seed"), [("chelsea.png", "coffee.png", 0), ("astronaut.png", "rocket.jpg", 1)])
def test_the_estimate_is_as_good_as_pymattings_on_a_known_foreground(
    photos: dict[str, Path], pymatting_ml: Any, fg: str, bg: str, seed: int
) -> None:
    case = hair.case(Image.open(photos[fg]), Image.open(photos[bg]), 240, 180, seed)
    theirs_f = pymatting_ml(case.image, case.alpha)
    ours_f = _ours(case.image, case.alpha)
    naive, theirs, ours = case.error(case.image), case.error(theirs_f), case.error(ours_f)
    apart = np.abs(_levels(ours_f) - _levels(theirs_f))
    print(
        f"{fg} over {bg}: error naive {naive:.3f}, pymatting {theirs:.3f}, ours {ours:.3f} (8-bit levels); "
        f"|ours - pymatting| mean {apart[case.partial].mean():.4f}, max {apart.max():.0f}"
    )
    assert ours <= theirs + ERROR_MARGIN
    assert ours <= NAIVE_SHARE * naive
    assert apart[case.partial].mean() <= LIMIT and apart.max() <= ROUNDING


@pytest.mark.parametrize("name", list(PHOTOS))
def test_on_photos_with_u2netps_matte_the_cutout_is_pymattings(
    photos: dict[str, Path], pymatting_ml: Any, u2netp: U2netpOnnx, name: str
) -> None:
    picture = PHOTOS[name](photos)
    (matte,) = u2netp.matte([picture])
    image = picture.astype(np.float32) / np.float32(255.0)
    alpha = matte.astype(np.float32) / np.float32(255.0)
    theirs = _levels(pymatting_ml(image, alpha))
    cutout = render(picture, matte, OutputsSpec(frozenset({"cutout"})), "cpu").cutout
    assert cutout is not None
    visible, partial = alpha > 0, (alpha > 0) & (alpha < 1)
    assert partial.sum() > 0.02 * alpha.size  # a real matte with soft edges, not a saturated one
    for way, ours in (
        ("served cutout", cutout[:, :, :3].astype(np.float32)),
        ("estimate", _levels(_ours(image, alpha))),
    ):
        apart = np.abs(ours - theirs)
        weighted = apart * alpha[:, :, None]
        print(
            f"{name}, {way} ({partial.sum()} partial pixels): |ours - pymatting| mean {apart[partial].mean():.4f} "
            f"(partial), {apart[visible].mean():.4f} (visible), max {apart.max():.0f}; "
            f"alpha-weighted p99 {np.percentile(weighted[visible], 99):.2f}"
        )
        assert apart[partial].mean() <= LIMIT and apart[visible].mean() <= LIMIT, way
        assert np.percentile(weighted[visible], 99) <= REAL_WEIGHTED_P99, way
        assert apart.max() <= ROUNDING, way


@st.composite
def _pictures(draw: st.DrawFn) -> tuple[F32, F32]:
    """A small random picture and an alpha with opaque, transparent and partial pixels."""
    h, w = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    image = rng.integers(0, 256, (h, w, 3)).astype(np.float32) / np.float32(255)
    alpha = rng.choice(np.array([0, 0, 255, 255, *range(1, 255, 23)]), (h, w)).astype(np.float32) / np.float32(255)
    return image, alpha


@given(_pictures())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_on_small_pictures_of_every_shape_the_estimate_is_pymattings(pymatting_ml: Any, case: tuple[F32, F32]) -> None:
    image, alpha = case
    ours = _ours(image, alpha)
    assert ours.shape == image.shape and np.isfinite(ours).all() and ours.min() >= 0 and ours.max() <= 1
    if image.shape[:2] == (1, 1):
        return  # pymatting divides by its zero levels there; ours has one
    apart = np.abs(_levels(ours) - _levels(pymatting_ml(image, alpha)))
    assert apart.max() <= ROUNDING, (image.shape, apart.max())


def test_an_8_bit_picture_and_matte_give_the_estimate_of_their_float_values(photos: dict[str, Path]) -> None:
    """What the cutout passes (8-bit, never held as floats at the picture's size) is read as v / 255."""
    picture = np.array(Image.open(photos["chelsea.png"]).convert("RGB"))[:120, :200]
    matte = hair.hair_alpha(120, 200, 3)
    bytes_ = (
        torch.from_numpy(picture).permute(2, 0, 1)[None],
        torch.from_numpy(np.round(matte * 255).astype(np.uint8)),
    )
    floats = (bytes_[0].float() / 255, bytes_[1].float() / 255)
    assert torch.equal(
        estimate_foreground(bytes_[0], bytes_[1][None, None]), estimate_foreground(floats[0], floats[1][None, None])
    )
