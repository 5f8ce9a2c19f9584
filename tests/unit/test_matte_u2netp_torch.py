"""rembg's steps on torch (craftai_infer.pipelines.matte_u2netp_torch) against the numpy code they
restate (matte_u2netp.preprocess / postprocess), byte for byte, for every `Steps`, on CPU tensors:
random pictures and the test photos, one over 2000 px, RGBA (the alpha dropped), constant maps,
the sigmoid steps, and numpy's own float32 exp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch
from PIL import Image

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.matte_u2netp import BIREFNET, BRIA, ISNET, ISNET_ANIME, U2NET, Steps
from craftai_infer.pipelines.matte_u2netp_torch import numpy_exp_f32, postprocess_torch, preprocess_torch

ALL_STEPS = {"u2net": U2NET, "isnet": ISNET, "isnet_anime": ISNET_ANIME, "birefnet": BIREFNET, "bria": BRIA}


def pictures(photos: dict[str, Path]) -> list[npt.NDArray[np.uint8]]:
    rng = np.random.default_rng(5)
    loaded = [np.array(Image.open(photos[name]).convert("RGB")) for name in ("chelsea.png", "coffee.png")]
    rgba = np.concatenate([loaded[0], rng.integers(0, 256, (*loaded[0].shape[:2], 1), dtype=np.uint8)], axis=2)
    dark = rng.integers(0, 40, (37, 53, 3), dtype=np.uint8)  # its maximum far from 255
    return [*loaded, rgba, dark, rng.integers(0, 256, (320, 320, 3), dtype=np.uint8)]


@pytest.mark.parametrize("name", list(ALL_STEPS))
def test_preprocess_is_the_numpy_codes_bit_for_bit(name: str, photos: dict[str, Path]) -> None:
    steps = ALL_STEPS[name]
    batch = pictures(photos) if steps.size == 320 else pictures(photos)[2:4]  # 1024²: fewer (CPU time)
    got = preprocess_torch([torch.from_numpy(p) for p in batch], steps)
    expected = np.concatenate([matte_u2netp.preprocess(p, steps=steps).copy() for p in batch])
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert np.array_equal(got.numpy().view(np.uint32), expected.view(np.uint32))


def test_a_picture_over_2000_pixels(photos: dict[str, Path]) -> None:
    """rocket.jpg enlarged to 2100 px high (a photo over 2000 px), to u2netp's square and back."""
    rocket = Image.open(photos["rocket.jpg"]).convert("RGB")
    picture = np.array(rocket.resize((rocket.width * 2100 // rocket.height, 2100)))
    got = preprocess_torch([torch.from_numpy(picture)], U2NET)
    assert np.array_equal(got.numpy(), matte_u2netp.preprocess(picture))
    rng = np.random.default_rng(11)
    fused = rng.random((1, 1, 320, 320), dtype=np.float32)
    size = (picture.shape[1], picture.shape[0])
    assert np.array_equal(
        postprocess_torch(torch.from_numpy(fused), [size])[0].numpy(), matte_u2netp.postprocess(fused, size)
    )


def maps(steps: Steps, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Smooth blobs (as a network answers) with noise: probabilities, or logits where the steps
    take the sigmoid (wide ones too, past where exp over- and underflows)."""
    side = steps.size
    yy, xx = np.mgrid[0:side, 0:side] / side
    blob: npt.NDArray[np.float64] = np.exp(-((xx - 0.5) ** 2 + (yy - 0.4) ** 2) * 8) + rng.normal(0, 0.05, (side, side))
    if steps.sigmoid:
        logits = (blob - 0.5) * float(rng.choice([12.0, 400.0]))
        return np.ascontiguousarray(logits.astype(np.float32)[None, None])
    return np.ascontiguousarray(np.clip(blob, 0, 1).astype(np.float32)[None, None])


@pytest.mark.parametrize("name", list(ALL_STEPS))
def test_postprocess_is_the_numpy_codes_bit_for_bit(name: str) -> None:
    steps = ALL_STEPS[name]
    rng = np.random.default_rng(len(name))
    sizes = [(451, 300), (300, 451), (640, 427)] if steps.size == 320 else [(451, 300), (1100, 700)]
    fused = np.concatenate([maps(steps, rng) for _ in sizes])
    got = postprocess_torch(torch.from_numpy(fused), sizes, steps)
    for i, size in enumerate(sizes):
        expected = matte_u2netp.postprocess(fused[i : i + 1], size, steps)
        assert got[i].dtype == torch.uint8 and np.array_equal(got[i].numpy(), expected), (name, size)


def test_the_sigmoid_on_wide_logits_and_constant_maps() -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(0, 1, (1, 1, 1024, 1024)) * rng.choice([1.0, 30.0, 120.0], (1, 1, 1024, 1024))
    logits = logits.astype(np.float32)
    constant = np.full((1, 1, 1024, 1024), 0.25, np.float32)
    nan = logits.copy()
    nan[0, 0, 5, 5] = np.nan
    for fused in (logits, constant, nan):
        got = postprocess_torch(torch.from_numpy(fused), [(200, 120)], BIREFNET)[0]
        with np.errstate(over="ignore"):  # exp(-x) overflows to inf for the widest logits, as in rembg
            expected = matte_u2netp.postprocess(fused, (200, 120), BIREFNET)
        assert np.array_equal(got.numpy(), expected)
    empty = postprocess_torch(torch.from_numpy(constant[:, :, :320, :320]), [(31, 17)], U2NET)[0]
    assert empty.shape == (17, 31) and not empty.any()


def test_numpys_float32_exp_is_restated() -> None:
    """The sigmoid needs numpy's exp itself (on this CPU: AVX2/AVX-512), not a correctly rounded
    one: every float32 of a wide sample, random bit patterns (subnormals, inf, NaN) included."""
    from numpy._core._multiarray_umath import __cpu_features__  # type: ignore[import-not-found]

    if not (__cpu_features__.get("AVX512F") or (__cpu_features__.get("AVX2") and __cpu_features__.get("FMA3"))):
        pytest.skip("numpy's float32 exp is the C library's on a CPU without AVX2 and FMA")
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            np.linspace(-110, 95, 400_001, dtype=np.float32),
            rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    with np.errstate(all="ignore"):
        expected = np.exp(values)
        correctly_rounded = np.exp(values.astype(np.float64)).astype(np.float32)
    got = numpy_exp_f32(torch.from_numpy(values)).numpy()
    assert np.array_equal(got, expected, equal_nan=True)
    assert not np.array_equal(expected, correctly_rounded, equal_nan=True)  # why torch.exp would not do
