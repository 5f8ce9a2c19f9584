"""image.matte's outputs made on the GPU (docs/MATTE.md: on the device that ran the matte) against the
same pipeline on the CPU, and through the service from the two kinds of routes: u2netp on torch
(its matte is a host array, uploaded for the outputs) and InSPyReNet (its matte stays on the GPU).

GPU only (CI has none and skips them with a reason); run on the lent GPU machine with
`bash tools/gpu/run_tests.sh tests/gpu/test_matte_outputs_gpu.py`. Each test prints what it found.
The composite, the mask and the naive cutout are integer arithmetic: equal on both devices. The
cutout's colours are the same estimation on both (pymatting's raster order; on CUDA each level's steps
in one Triton launch, pipelines/foreground_kernel.py), float32 on both and rounded differently on the
GPU (fused multiply-adds): FG_MEAN and FG_MAX bound how far its 8-bit colours may move from the CPU's.
On CUDA the estimation is checked against pymatting at the project's limit on the photos of
tests/parity/test_foreground_pymatting.py, and the kernel split between blocks against one block
(the same arithmetic: any difference is a race between the blocks).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from craftai import AiClient
from craftai_dev import pymatting_reference, servers
from craftai_infer.pipelines import foreground_kernel, matte_outputs
from craftai_infer.pipelines.foreground import estimate_foreground
from craftai_infer.pipelines.matte_spec import Blur, Cover, Kind, OutputsSpec, Solid
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx

pytestmark = [pytest.mark.gpu]
FG_MEAN = 0.05  # mean |F_gpu - F_cpu| over the visible pixels, 8-bit levels
FG_MAX = 2  # and the largest
LIMIT = 1.0  # mean |F_cuda - F_pymatting| over the partial and the visible pixels, 8-bit levels
ROUNDING = 2  # the largest |F_cuda - F_pymatting| at any pixel: float32 rounded two ways
ALL: frozenset[Kind] = frozenset(("matte", "cutout", "composite", "mask"))


def _png(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


@pytest.fixture(scope="module")
def chelsea_and_matte(photos: dict[str, Path], u2netp_file: Path) -> tuple[np.ndarray, np.ndarray]:
    picture = np.array(Image.open(photos["chelsea.png"]).convert("RGB"))
    (matte,) = U2netpOnnx(RouteFiles({"network": u2netp_file}, None, 4), "cpu").matte([picture])
    return picture, np.array(matte)


def test_the_foreground_estimate_on_cuda_is_the_cpus(chelsea_and_matte: tuple[np.ndarray, np.ndarray]) -> None:
    picture, matte = chelsea_and_matte
    image = torch.from_numpy(picture).permute(2, 0, 1)[None].float() / 255
    alpha = torch.from_numpy(matte)[None, None].float() / 255
    cpu = estimate_foreground(image, alpha)
    cuda = estimate_foreground(image.cuda(), alpha.cuda())
    coarse_on_cpu = estimate_foreground(image.cuda(), alpha.cuda(), coarse_device=torch.device("cpu"))
    visible = matte > 0
    for name, found in (("all on cuda", cuda), ("coarse levels on the cpu", coarse_on_cpu)):
        diff = (torch.floor(found.cpu() * 255 + 0.5) - torch.floor(cpu * 255 + 0.5)).abs()[0].permute(1, 2, 0).numpy()
        print(f"foreground on cuda ({name}) vs cpu: mean {diff[visible].mean():.4f}, max {diff[visible].max():.0f}")
        assert diff[visible].mean() <= FG_MEAN and diff[visible].max() <= FG_MAX, name


@pytest.mark.parametrize("name", ["chelsea.png", "astronaut.png", "rocket.jpg"])
def test_the_foreground_estimate_on_cuda_is_pymattings(photos: dict[str, Path], u2netp_file: Path, name: str) -> None:
    estimate_foreground_ml = pymatting_reference.estimate_foreground_ml()

    picture = np.array(Image.open(photos[name]).convert("RGB"))
    (matte,) = U2netpOnnx(RouteFiles({"network": u2netp_file}, None, 4), "cpu").matte([picture])
    image, alpha = picture.astype(np.float32) / np.float32(255), matte.astype(np.float32) / np.float32(255)
    theirs = np.floor(estimate_foreground_ml(image, alpha) * 255 + 0.5)
    found = estimate_foreground(
        torch.from_numpy(picture).cuda().permute(2, 0, 1)[None],
        torch.from_numpy(np.array(matte)).cuda()[None, None],
        coarse_device=torch.device("cpu"),
    )
    ours = torch.floor(found[0].permute(1, 2, 0).cpu() * 255 + 0.5).numpy()
    apart = np.abs(ours - theirs)
    partial, visible = (matte > 0) & (matte < 255), matte > 0
    print(f"{name} on cuda vs pymatting: mean {apart[partial].mean():.4f} (partial), max {apart.max():.0f}")
    assert apart[partial].mean() <= LIMIT and apart[visible].mean() <= LIMIT and apart.max() <= ROUNDING


@pytest.mark.parametrize("name", ["chelsea.png", "astronaut.png", "coffee.png"])
def test_the_kernel_split_between_blocks_is_one_block(photos: dict[str, Path], u2netp_file: Path, name: str) -> None:
    """2048x1536: the top levels' steps are split between every block; a race shows as any difference."""
    picture = Image.open(photos[name]).convert("RGB")
    (matte,) = U2netpOnnx(RouteFiles({"network": u2netp_file}, None, 4), "cpu").matte([np.array(picture)])
    size = (2048, 1536)
    image = torch.from_numpy(np.array(picture.resize(size, Image.Resampling.BICUBIC))).cuda().permute(2, 0, 1)[None]
    alpha = torch.from_numpy(np.array(Image.fromarray(matte).resize(size, Image.Resampling.BILINEAR))).cuda()
    assert foreground_kernel.runs_on(image.device)
    found = {}
    default = foreground_kernel.PROGRAMS
    try:
        for programs in sorted({1, default, 4 * default}):
            foreground_kernel.PROGRAMS = programs
            found[programs] = estimate_foreground(image, alpha[None, None], coarse_device=torch.device("cpu"))
    finally:
        foreground_kernel.PROGRAMS = default
    assert foreground_kernel.broken() is None  # the kernel ran, not the host-launched steps
    for programs, estimate in found.items():
        apart = float((estimate - found[1]).abs().max())
        print(f"{name} 2048x1536: the kernel on {programs} blocks vs 1: max |d| {apart}")
        assert apart == 0.0


def test_every_output_on_cuda_is_the_cpus(
    chelsea_and_matte: tuple[np.ndarray, np.ndarray], photos: dict[str, Path]
) -> None:
    picture, matte = chelsea_and_matte
    coffee = np.array(Image.open(photos["coffee.png"]).convert("RGB"))
    for background in (Solid((32, 96, 240, 200)), Blur(6.0), Cover(coffee)):
        for naive in (True, False):
            spec = OutputsSpec(ALL, naive, background, 0.4)
            cpu = matte_outputs.render(picture, matte, spec, "cpu")
            cuda = matte_outputs.render(picture, torch.from_numpy(matte).cuda(), spec, "cuda:0")
            assert cpu.matte is not None and cuda.matte is not None and cpu.mask is not None and cuda.mask is not None
            assert np.array_equal(cpu.matte, cuda.matte) and np.array_equal(cpu.mask, cuda.mask)
            assert cpu.cutout is not None and cuda.cutout is not None
            assert np.array_equal(cpu.cutout[:, :, 3], cuda.cutout[:, :, 3])
            colours = np.abs(cpu.cutout[:, :, :3].astype(int) - cuda.cutout[:, :, :3])[matte > 0]
            assert cuda.composite is not None and cpu.composite is not None
            # the composite from the GPU's own cutout and background is the CPU's arithmetic, exactly
            behind = matte_outputs.background_layer(background, torch.from_numpy(picture).cuda())
            exact = matte_outputs.composite(torch.from_numpy(cuda.cutout).cuda(), behind, background.opaque).cpu()
            assert np.array_equal(cuda.composite, exact.numpy())
            scene = np.abs(cpu.composite.astype(int) - cuda.composite).max()
            print(
                f"{type(background).__name__} naive={naive}: cutout colours max |d| {colours.max()}, composite {scene}"
            )
            if naive:
                assert colours.max() == 0 and (scene == 0 or not isinstance(background, Solid))
            assert colours.mean() <= FG_MEAN and colours.max() <= FG_MAX
            assert scene <= FG_MAX + 1  # the blur and the cover scaling are float: one level of rounding


def test_u2netp_torch_route_makes_every_output_on_cuda(matte_server: servers.Process, photos: dict[str, Path]) -> None:
    data = photos["chelsea.png"].read_bytes()
    picture = np.array(Image.open(photos["chelsea.png"]).convert("RGB"))
    with AiClient(app_id="tests", target=matte_server.address) as ai:
        list(ai.setup("image.matte", "u2netp", "torch"))
        result = ai.remove_background(
            data, recipe="u2netp", engine="torch", outputs="matte,cutout,composite,mask", bg_color="#2060f0"
        )
    assert result.device.startswith("cuda") and result.cutout is not None and result.composite is not None
    assert result.mask is not None
    matte = _png(result.matte_png)
    spec = OutputsSpec(ALL, False, Solid((0x20, 0x60, 0xF0, 255)), 0.5)
    cpu = matte_outputs.render(picture, matte, spec, "cpu")
    assert cpu.cutout is not None and cpu.mask is not None
    cutout = _png(result.cutout.data)
    assert np.array_equal(cutout[:, :, 3], cpu.cutout[:, :, 3])
    colours = np.abs(cutout[:, :, :3].astype(int) - cpu.cutout[:, :, :3])[matte > 0]
    found = f"max |d| {colours.max()}, mean {colours.mean():.4f}"
    print(f"u2netp torch on {result.device}: cutout vs the CPU pipeline {found}")
    assert colours.mean() <= FG_MEAN and colours.max() <= FG_MAX
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(result.mask.data))), cpu.mask)
    blue = torch.tensor((0x20, 0x60, 0xF0, 255), dtype=torch.uint8).expand(*matte.shape, 4)
    assert np.array_equal(
        _png(result.composite.data), matte_outputs.composite(torch.from_numpy(cutout.copy()), blue, True).numpy()
    )


def test_inspyrenet_hands_its_matte_over_on_cuda_at_4000x3000(
    inspyrenet_servers: dict[str, servers.Process], photos: dict[str, Path]
) -> None:
    """The matte stays on the GPU for the outputs; a 12 MP picture (the reduced-and-refined path)."""
    big = Image.open(photos["astronaut.png"]).convert("RGB").resize((4000, 3000), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    big.save(out, format="JPEG", quality=92)
    with AiClient(app_id="tests", target=inspyrenet_servers["auto"].address) as ai:
        result = ai.remove_background(
            out.getvalue(), recipe="inspyrenet-swinb", outputs="matte,cutout,composite,mask", bg_blur=12.0
        )
    assert result.device.startswith("cuda") and result.cutout is not None and result.composite is not None
    matte, cutout = _png(result.matte_png), _png(result.cutout.data)
    assert matte.shape == (3000, 4000) and cutout.shape == (3000, 4000, 4)
    assert np.array_equal(cutout[:, :, 3], matte)
    print(f"InSPyReNet on {result.device}, 4000x3000, every output: server stages {result.timing_ms}")
