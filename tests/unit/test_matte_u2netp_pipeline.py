"""u2netp pre/post-processing: shapes, rembg's normalisation (divide by the max), sizes, edge cases."""

from __future__ import annotations

import numpy as np
from PIL import Image

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_spec import OutputsSpec
from craftai_models import imagenet


def cutout(picture: np.ndarray, matte: np.ndarray) -> np.ndarray:
    """The naive cutout (the picture's colours, the matte as alpha), as image.matte makes it."""
    made = render(picture, matte, OutputsSpec(frozenset({"cutout"}), naive=True), "cpu").cutout
    assert made is not None
    return made


def test_preprocess_divides_by_the_picture_max_not_255() -> None:
    dim = Image.new("RGB", (50, 30), (100, 100, 100))
    x = matte_u2netp.preprocess(np.asarray(dim))
    assert x.shape == (1, 3, 320, 320) and x.dtype == np.float32
    # every pixel equals the max, so each channel is (1 - mean) / std
    expected = (1 - np.asarray(imagenet.MEAN)) / np.asarray(imagenet.STD)
    np.testing.assert_allclose(x[0, :, 0, 0], expected, rtol=1e-6)


def test_preprocess_in_place_is_rembgs_arithmetic_bit_for_bit_and_keeps_nothing_between_pictures() -> None:
    """One Scratch for two pictures in turn (as a route's thread keeps it) gives each the float32
    batch of rembg's own expression, exactly: the same operations in the same order, in place."""
    rng = np.random.default_rng(7)
    scratch = matte_u2netp.Scratch()
    for size, high in (((77, 41), 255), ((400, 300), 180), ((320, 320), 255)):
        picture = rng.integers(0, high, (*size, 3), dtype=np.uint8)
        small = np.asarray(Image.fromarray(picture).resize((320, 320), Image.Resampling.LANCZOS))
        pixels = small.astype(np.float64)
        pixels = pixels / max(float(pixels.max()), 1e-6)
        expected = ((pixels - np.asarray(imagenet.MEAN)) / np.asarray(imagenet.STD)).transpose(2, 0, 1)[None]
        got = matte_u2netp.preprocess(picture, scratch)
        assert got is scratch.batch
        np.testing.assert_array_equal(got, expected.astype(np.float32))
        np.testing.assert_array_equal(matte_u2netp.preprocess(picture), got)  # fresh arrays: the same


def test_preprocess_of_a_black_picture_does_not_divide_by_zero() -> None:
    x = matte_u2netp.preprocess(np.asarray(Image.new("RGB", (5, 5))))
    assert np.isfinite(x).all()


def test_postprocess_normalises_and_resizes_to_the_picture() -> None:
    fused = np.zeros((1, 1, 320, 320), np.float32)
    fused[0, 0, 100:200, 100:200] = 0.7
    fused[0, 0, 0, 0] = 0.1
    matte = matte_u2netp.postprocess(fused, (451, 300))
    assert matte.shape == (300, 451) and matte.dtype == np.uint8  # (width, height) 451x300, 8-bit grey
    pixels = matte
    assert pixels.max() == 255 and pixels[150, 10] == 0
    assert abs(int(pixels[0, 0]) - round(0.1 / 0.7 * 255)) <= 2  # min-max normalised: (0.1 - 0) / (0.7 - 0)


def test_constant_map_gives_an_empty_matte() -> None:
    matte = matte_u2netp.postprocess(np.full((1, 1, 320, 320), 0.5, np.float32), (7, 3))
    assert np.asarray(matte).max() == 0


def test_cutout_keeps_colours_and_multiplies_existing_alpha() -> None:
    picture = np.asarray(Image.new("RGBA", (4, 2), (10, 20, 30, 128)))
    matte = np.asarray(Image.new("L", (4, 2), 255))
    out = cutout(picture, matte)
    assert tuple(out[0, 0]) == (10, 20, 30, 128)
    out = cutout(np.asarray(Image.new("RGB", (4, 2), (10, 20, 30))), np.asarray(Image.new("L", (4, 2), 64)))
    assert tuple(out[1, 1]) == (10, 20, 30, 64)


def test_a_batch_on_host_threads_is_each_picture_alone() -> None:
    """`preprocess_all` and `postprocess_all` on a pool's threads (a GPU route's batch of frames)
    answer each picture's own `preprocess` and `postprocess`, in order, at each picture's size."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    pictures = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in ((90, 120), (321, 200), (64, 64))]
    maps = rng.random((3, 1, 320, 320)).astype(np.float32)
    with ThreadPoolExecutor(3) as host:
        batch = matte_u2netp.preprocess_all(pictures, host=host)
        mattes = matte_u2netp.postprocess_all(maps, pictures, host=host)
    for i, picture in enumerate(pictures):
        assert np.array_equal(batch[i : i + 1], matte_u2netp.preprocess(picture))
        expected = matte_u2netp.postprocess(maps[i : i + 1], (picture.shape[1], picture.shape[0]))
        assert np.array_equal(mattes[i], expected) and mattes[i].shape == picture.shape[:2]
