"""Pillow's Lanczos resize and rembg's steps on torch (pipelines.pillow_resize,
pipelines.matte_u2netp_torch) with the tensors on the GPU: the same bytes as Pillow and as the numpy
code on the host (tests/unit/test_pillow_lanczos.py and test_matte_u2netp_torch.py on the CPU)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.matte_u2netp import BIREFNET, BRIA, ISNET, ISNET_ANIME, U2NET
from craftai_infer.pipelines.matte_u2netp_torch import numpy_exp_f32, postprocess_torch, preprocess_torch
from craftai_infer.pipelines.pillow_resize import resize_lanczos_by_passes, resize_lanczos_u8

pytestmark = pytest.mark.gpu

LANCZOS = Image.Resampling.LANCZOS
SHAPES = [(1, 1), (2, 3), (17, 31), (300, 451), (451, 300), (1080, 1920), (1920, 1080)]
TARGETS = [(1, 5), (97, 61), (320, 320), (1024, 1024), (1080, 1920)]


@pytest.mark.parametrize(("size", "target"), list(itertools.product(SHAPES, TARGETS)))
def test_lanczos_on_the_gpu_is_pillows(size: tuple[int, int], target: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(size) + sum(target))
    rgb = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, size, dtype=np.uint8)
    height, width = target
    for picture in (rgb, grey):
        expected = np.asarray(Image.fromarray(picture).resize((width, height), LANCZOS))
        on_gpu = torch.from_numpy(picture).cuda()
        assert np.array_equal(resize_lanczos_by_passes(on_gpu, height, width).cpu().numpy(), expected)
        assert np.array_equal(resize_lanczos_u8(on_gpu, height, width).cpu().numpy(), expected)


def test_a_4000_by_3000_picture_to_1024_and_back() -> None:
    rng = np.random.default_rng(4)
    picture = rng.integers(0, 256, (3000, 4000, 3), dtype=np.uint8)
    for steps in (U2NET, BIREFNET):
        got = preprocess_torch([torch.from_numpy(picture).cuda()], steps)
        assert np.array_equal(got.cpu().numpy(), matte_u2netp.preprocess(picture, steps=steps))
    fused = rng.normal(0, 4, (1, 1, 1024, 1024)).astype(np.float32)
    got = postprocess_torch(torch.from_numpy(fused).cuda(), [(4000, 3000)], BIREFNET)[0]
    assert np.array_equal(got.cpu().numpy(), matte_u2netp.postprocess(fused, (4000, 3000), BIREFNET))


@pytest.mark.parametrize("steps", [U2NET, ISNET, ISNET_ANIME, BIREFNET, BRIA])
def test_rembgs_steps_on_the_gpu(steps: matte_u2netp.Steps) -> None:
    rng = np.random.default_rng(steps.size)
    batch = [
        rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8),
        rng.integers(0, 256, (451, 300, 4), dtype=np.uint8),  # RGBA: the alpha dropped
        rng.integers(0, 30, (37, 53, 3), dtype=np.uint8),
    ]
    got = preprocess_torch([torch.from_numpy(p).cuda() for p in batch], steps)
    expected = np.concatenate([matte_u2netp.preprocess(p, steps=steps).copy() for p in batch])
    assert np.array_equal(got.cpu().numpy().view(np.uint32), expected.view(np.uint32))
    scale = 30.0 if steps.sigmoid else 1.0
    fused = (rng.random((3, 1, steps.size, steps.size), dtype=np.float32) - (0.5 if steps.sigmoid else 0.0)) * scale
    fused[2] = 0.5  # a constant map: an empty matte
    sizes = [(p.shape[1], p.shape[0]) for p in batch]
    mattes = postprocess_torch(torch.from_numpy(fused).cuda(), sizes, steps)
    for i, size in enumerate(sizes):
        with np.errstate(over="ignore"):
            expected_matte = matte_u2netp.postprocess(fused[i : i + 1], size, steps)
        assert np.array_equal(mattes[i].cpu().numpy(), expected_matte)


def test_numpys_exp_on_the_gpu() -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            np.linspace(-110, 95, 2_000_001, dtype=np.float32),
            rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    with np.errstate(all="ignore"):
        expected = np.exp(values)
    got = numpy_exp_f32(torch.from_numpy(values).cuda()).cpu().numpy()
    assert np.array_equal(got, expected, equal_nan=True)


def test_the_u2netp_route_checks_the_steps_on_the_gpu_and_uses_them(
    u2netp_converted: dict[str, torch.Tensor], tmp_path: Path, photos: dict[str, Path]
) -> None:
    """routes/u2netp_torch.py on cuda: its load checks the steps there (matte_u2netp_torch.disagreement)
    and turns them on; its mattes are then the host path's, byte for byte, as device tensors."""
    from safetensors.torch import save_file

    from craftai_infer.routes import RouteFiles
    from craftai_infer.routes.u2netp_torch import U2netpTorch
    from craftai_models.u2netp import WEIGHTS

    save_file(u2netp_converted, str(tmp_path / WEIGHTS))
    route = U2netpTorch(RouteFiles({}, tmp_path, cpu_threads=2), "cuda:0")
    steps: list[str] = []
    route.warm_up(steps.append)
    assert route.steps_on_device and steps, steps
    pictures = [np.asarray(Image.open(photos[name]).convert("RGB")) for name in ("chelsea.png", "rocket.jpg")]
    on_device = route.matte(pictures)
    route.steps_on_device = False
    on_host = route.matte(pictures)
    for device, host in zip(on_device, on_host, strict=True):
        assert isinstance(device, torch.Tensor) and device.is_cuda
        assert np.array_equal(device.cpu().numpy(), host)
