"""BiRefNet on the GPU: the deformable convolution against torchvision's own, the lite network at
1024² against nobg's (with torchvision's deform_conv2d, which imports there) in both patch
orders, the Swin-L network at 1024² against nobg's Swin-L from the same fp16 file as published,
the torch route on CUDA (fp32, then its default autocast) against the CPU route, and birefnet-hr's
torch route at 2048² against the authors' inference with nobg's Swin-L.

GPU only (CI has none and skips them with a reason); run on the lent GPU machine with
`bash tools/gpu/run_tests.sh tests/gpu/test_birefnet_cuda.py` (carry the nobg wheel in .whl/).
Tolerances: fp32 (TF32 off, as the service runs fp32) within 1e-3 of the reference's range at
every stage; the route's reduced-precision default: the >0.5 masks at IoU >= 0.99 and each test
prints what it found for docs/PERFORMANCE.md."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import Tensor

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import (
    METADATA,
    calibrate_batchnorm,
    checkpoints,
    photo_input,
    prepared_folder,
    randomised_state_dict,
    swin_l_prepared,
)
from craftai_infer.routes import RouteFiles
from craftai_models.birefnet import (
    TRAINED_ORDER,
    Architecture,
    PatchOrder,
    birefnet_swin_l,
    load_birefnet,
)
from craftai_models.deform_conv import deform_conv2d

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
FP32_RTOL = 1e-3


@pytest.fixture(scope="module", autouse=True)
def strict_fp32() -> Iterator[None]:
    """As the infer service does on a GPU (craftai_infer/device.py): fp32 means fp32, not TF32."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.fixture(autouse=True)
def cuda_cache_given_back() -> Iterator[None]:
    """What a test leaves in torch's cache goes back to the driver after it: the services that later
    GPU tests start size what they load on the GPU's free memory."""
    yield
    gc.collect()
    torch.cuda.empty_cache()


def _torchvision_deform() -> Any:
    ops = pytest.importorskip("torchvision.ops")
    return ops.deform_conv2d


def relative(ours: Tensor, reference: Tensor) -> float:
    return float((ours.float() - reference.float()).abs().max() / reference.float().abs().max().clamp_min(1e-12))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize(("kernel", "side"), [(1, 64), (3, 96), (7, 256)])
def test_deformable_convolution_equals_torchvisions(device: str, kernel: int, side: int) -> None:
    reference_op = _torchvision_deform()
    gen = torch.Generator().manual_seed(kernel * side)
    x = torch.randn(1, 64, side, side, generator=gen)
    offset = torch.randn(1, 2 * kernel * kernel, side, side, generator=gen) * 3
    mask = 2 * torch.sigmoid(torch.randn(1, kernel * kernel, side, side, generator=gen))
    weight = torch.randn(32, 64, kernel, kernel, generator=gen) / (64 * kernel * kernel) ** 0.5
    x, offset, mask, weight = (t.to(device) for t in (x, offset, mask, weight))
    pad = (kernel // 2, kernel // 2)
    ours = deform_conv2d(x, offset, mask, weight, padding=pad)
    theirs = reference_op(x, offset, weight, padding=pad, mask=mask)
    error = relative(ours, theirs)
    print(f"deform_conv2d {kernel}x{kernel} at {side}² on {device}: max |ours - torchvision| / max |tv| {error:.2e}")
    assert error <= 1e-4


def test_the_pictures_squash_on_cuda_is_pillows_bit_for_bit(photos: dict[str, Path]) -> None:
    """The network's input on a GPU: Pillow's 8-bit two-pass resize, the width first, as on the CPU
    (where Pillow itself runs it), at the sizes a route sees (reduced, enlarged, both)."""
    from craftai_infer.pipelines.pillow_resize import resize_by_passes

    rgb = np.asarray(Image.open(photos["coffee.png"]).convert("RGB"))
    for scale in (1, 7):
        picture = np.asarray(Image.fromarray(rgb).resize((rgb.shape[1] * scale, rgb.shape[0] * scale)))
        wide = Image.fromarray(picture).resize((1024, picture.shape[0]), Image.Resampling.BILINEAR)
        expected = np.asarray(wide.resize((1024, 1024), Image.Resampling.BILINEAR))
        ours = resize_by_passes(torch.from_numpy(picture.copy()).cuda(), 1024, 1024).cpu().numpy()
        assert np.array_equal(ours, expected), scale


def test_network_at_1024_equals_nobgs_in_both_patch_orders(tmp_path: Path) -> None:
    _torchvision_deform()  # nobg with the real torchvision.ops.deform_conv2d
    made = checkpoints()["random"]
    (tmp_path / "model.safetensors").symlink_to(made.path)
    reference = birefnet_reference.reference_from_origin(tmp_path).cuda()
    assert not birefnet_reference.deform_conv_is_stood_in()
    x = photo_input(1024).cuda()
    with torch.inference_mode():
        theirs = reference(x)
        ours = load_birefnet(made.path, "cuda", PatchOrder.CHANNEL_MAJOR).stages(x)
        errors = {"logits": relative(ours.decoder.logits, theirs["logits"])}
        for i, side in enumerate(theirs["intermediate_logits"]):
            errors[f"side logits {4 - i}"] = relative(ours.decoder.side[i], side)
        restore = birefnet_reference.use_patch_order(birefnet_reference.get_patches_batch)
        try:
            theirs_trained = reference(x)["logits"]
        finally:
            restore()
        trained = load_birefnet(made.path, "cuda", TRAINED_ORDER)(x)
        errors["logits, trained patch order"] = relative(trained, theirs_trained)
        errors["(the two orders differ by)"] = relative(theirs_trained, theirs["logits"])
    print("\n".join(f"BiRefNet 1024² fp32 {k}: {v:.2e}" for k, v in errors.items()))
    assert max(v for k, v in errors.items() if not k.startswith("(")) <= FP32_RTOL
    assert errors["(the two orders differ by)"] > 1e-2


def test_swin_l_network_at_1024_equals_nobgs(tmp_path: Path) -> None:
    """A random Swin-L BiRefNet, its BatchNorms calibrated on a photo at 1024², stored as the
    published files are (fp16 floats), read by both: ours strictly, nobg through from_origin."""
    from safetensors.torch import save_file

    _torchvision_deform()
    with torch.device("meta"):
        network = birefnet_swin_l(PatchOrder.CHANNEL_MAJOR)
    network.load_state_dict(randomised_state_dict(network, seed=7), strict=True, assign=True)
    x = photo_input(1024)
    state = calibrate_batchnorm(network.cuda().eval(), x.cuda())
    published = {k: (v.half() if v.is_floating_point() else v).cpu().contiguous() for k, v in state.items()}
    del network, state
    save_file(published, str(tmp_path / "model.safetensors"), metadata=METADATA)
    reference = birefnet_reference.reference_from_origin(tmp_path, swin_l=True).cuda()
    with torch.inference_mode():
        theirs = reference(x.cuda())
        ours = load_birefnet(
            tmp_path / "model.safetensors", "cuda", PatchOrder.CHANNEL_MAJOR, architecture=Architecture.SWIN_L
        ).stages(x.cuda())
    errors = {"logits": relative(ours.decoder.logits, theirs["logits"])}
    for i, side in enumerate(theirs["intermediate_logits"]):
        errors[f"side logits {4 - i}"] = relative(ours.decoder.side[i], side)
    matte = torch.sigmoid(theirs["logits"])
    share = float((matte > 0.5).float().mean())
    print("\n".join(f"BiRefNet Swin-L 1024² fp32 {k}: {v:.2e}" for k, v in errors.items()))
    print(f"BiRefNet Swin-L 1024²: matte > 0.5 on {share:.2f} of the picture")
    assert 0.05 < share < 0.95  # calibrated: not a saturated matte
    assert max(errors.values()) <= FP32_RTOL


class _OnCuda(torch.nn.Module):
    """nobg's network on the GPU answering `author_matte`'s CPU tensors."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"logits": self.network(x.cuda())["logits"].float().cpu()}


@pytest.mark.parametrize("photo", ["chelsea.png", "astronaut.png"])
def test_the_hr_route_answers_the_authors_matte_at_2048(tmp_path: Path, photo: str, photos: dict[str, Path]) -> None:
    """birefnet-hr's torch route (Swin-L at 2048², channel-major, the prepared folder as the
    preparation lays it out) against the authors' inference with nobg's Swin-L at 2048² from the
    same fp16 file: a random network whose BatchNorms are calibrated on this picture at 2048², held
    to the bounds of the HR ONNX route's test (tests/integration/test_birefnet_hr.py)."""
    from craftai_infer.routes import MATTE
    from craftai_infer.routes.birefnet_torch import BirefnetTorch

    _torchvision_deform()
    picture = np.asarray(Image.open(photos[photo]).convert("RGB"))
    swin_l_prepared(tmp_path, "cuda", 2048, PatchOrder.CHANNEL_MAJOR, photo)
    route = BirefnetTorch(RouteFiles({}, tmp_path, 0, gpu_precision="auto"), "cuda")
    assert route.settings.size == 2048 and route.capabilities.max_batch == {MATTE: 1}
    route.warm_up(lambda _message: None)
    (matte,) = route.matte([picture])
    ours = matte.cpu().numpy().astype(np.float32) / 255
    del route
    torch.cuda.empty_cache()
    reference = birefnet_reference.reference_from_origin(tmp_path, swin_l=True).cuda()
    theirs = birefnet_reference.author_matte(picture, _OnCuda(reference), 2048)
    mine, expected = ours > 0.5, theirs > 0.5
    iou = float((mine & expected).sum() / max(1, (mine | expected).sum()))
    mean = float(np.abs(ours - theirs).mean())
    print(f"BiRefNet HR route 2048² {photo}: IoU {iou:.4f}, mean |d| {mean:.4f}, subject share {expected.mean():.2f}")
    assert ours.shape == theirs.shape == picture.shape[:2]
    assert 0.05 < expected.mean() < 0.95  # calibrated on this picture: not a saturated matte
    assert iou >= 0.99 and mean <= 0.01


def _route(device: str, precision: str) -> Any:
    from craftai_infer.routes.birefnet_torch import BirefnetTorch

    made = checkpoints()["random"]
    files = RouteFiles({}, prepared_folder(made), 0, gpu_precision=precision)  # type: ignore[arg-type]
    return BirefnetTorch(files, device)


def test_the_route_on_cuda_agrees_with_the_cpu_route(photos: dict[str, Path]) -> None:
    from craftai_infer import device

    assert device.detect("auto").gpu_available  # and fp32 made strict, as in the service
    picture = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))
    reference = _route("cpu", "auto").matte([picture])[0].numpy().astype(int)
    for precision in ("fp32", "auto", "fp16", "bf16"):
        route = _route("cuda", precision)
        route.warm_up(lambda _message: None)
        on_device = route.matte([picture, picture])  # a batch of two through the graph
        assert all(m.device.type == "cuda" and m.dtype == torch.uint8 for m in on_device)  # kept there (routes.MATTE)
        found = [m.cpu().numpy() for m in on_device]
        assert np.array_equal(found[0], found[1])
        matte = found[0].astype(int)
        a, b = matte > 127, reference > 127
        iou = float((a & b).sum() / (a | b).sum())
        diff = np.abs(matte - reference)
        print(f"BiRefNet route cuda {precision}: max |d| {diff.max()}, mean {diff.mean():.3f} (of 255), IoU {iou:.5f}")
        assert matte.shape == reference.shape == (300, 451)
        if route.autocast is None:  # fp32, and "auto" (the route's default: BirefnetTorch's GPU_DEFAULT)
            assert diff.max() <= 1
        else:  # opt-in autocast: near, not equal (measured: bf16 3.7/255 on average, IoU 0.79 on random weights)
            assert diff.mean() <= 8


def test_rembgs_steps_on_cuda_agree_with_the_cpu_route(photos: dict[str, Path]) -> None:
    """birefnet-general's and -portrait's torch route (rembg's steps around the network): a batch of
    two pictures through its CUDA graph against the CPU route, which tests/parity compares with
    rembg's session; the calibrated lite checkpoint stands in (the route reads the configuration
    from the folder, and the Swin-L network is checked against nobg's above)."""
    from craftai_infer.routes.birefnet_rembg_torch import BirefnetRembgTorch

    files = RouteFiles({}, prepared_folder(checkpoints()["random"]), 0, gpu_precision="auto")
    cpu, cuda = BirefnetRembgTorch(files, "cpu"), BirefnetRembgTorch(files, "cuda")
    cuda.warm_up(lambda _message: None)
    assert cuda.autocast is None and cuda.capabilities.max_batch
    pictures = [np.asarray(Image.open(photos[n]).convert("RGB")) for n in ("chelsea.png", "astronaut.png")]
    assert cuda.steps_on_device  # rembg's steps checked on the GPU as it loaded, and run there
    found = cuda.matte(pictures)
    for name, picture, on_cuda in zip(("chelsea.png", "astronaut.png"), pictures, found, strict=True):
        assert isinstance(on_cuda, torch.Tensor) and on_cuda.is_cuda
        (on_cpu,) = cpu.matte([picture])
        assert isinstance(on_cpu, np.ndarray)
        matte, reference = on_cuda.cpu().numpy().astype(int), on_cpu.astype(int)
        diff = np.abs(matte - reference)
        print(f"BiRefNet rembg-steps route cuda {name}: max |d| {diff.max()}, mean {diff.mean():.4f} (of 255)")
        assert matte.shape == picture.shape[:2] and 0.02 < float((reference > 127).mean()) < 0.98
        assert diff.max() <= 2 and diff.mean() <= 0.05, name


def test_the_route_hands_its_matte_over_on_cuda_for_every_output_at_4000x3000(photos: dict[str, Path]) -> None:
    """routes.MATTE on the torch route: its matte stays on the GPU (a tensor there) and every output
    of issue 17 is made from it there, on the reduced-and-refined path of a 12 MP picture; the
    integer outputs equal the CPU pipeline's from the same matte, the estimated colours within the
    foreground's bounds (tests/gpu/test_matte_outputs_gpu.py)."""
    from craftai_infer.pipelines import matte_outputs
    from craftai_infer.pipelines.matte_spec import Kind, OutputsSpec, Solid
    from craftai_infer.routes import MATTE, MatteJob

    big = np.asarray(Image.open(photos["astronaut.png"]).convert("RGB").resize((4000, 3000), Image.Resampling.BICUBIC))
    route = _route("cuda", "auto")
    (on_device,) = route.matte([big])
    assert on_device.device.type == "cuda" and tuple(on_device.shape) == (3000, 4000)
    kinds: frozenset[Kind] = frozenset(("matte", "cutout", "composite", "mask"))
    spec = OutputsSpec(kinds, background=Solid((32, 96, 240, 255)), threshold=0.4)
    (rendered,) = MATTE.call(route, [MatteJob(big, spec)])
    assert rendered.matte is not None and rendered.cutout is not None and rendered.composite is not None
    assert rendered.mask is not None
    cpu = matte_outputs.render(big, rendered.matte, spec, "cpu")
    assert cpu.cutout is not None and cpu.mask is not None
    assert np.array_equal(rendered.matte, on_device.cpu().numpy())
    assert np.array_equal(rendered.mask, cpu.mask) and np.array_equal(rendered.cutout[:, :, 3], rendered.matte)
    colours = np.abs(rendered.cutout[:, :, :3].astype(int) - cpu.cutout[:, :, :3])[rendered.matte > 0]
    print(f"BiRefNet route cuda 4000x3000, every output: cutout colours vs the CPU pipeline max {colours.max()}")
    assert colours.mean() <= 0.05 and colours.max() <= 3
    blue = torch.tensor((32, 96, 240, 255), dtype=torch.uint8).expand(3000, 4000, 4)
    exact = matte_outputs.composite(torch.from_numpy(rendered.cutout.copy()), blue, opaque=True).numpy()
    assert np.array_equal(rendered.composite, exact)


def test_the_dynamic_route_answers_the_authors_matte_at_the_pictures_size(
    tmp_path: Path, photos: dict[str, Path]
) -> None:
    """birefnet-dynamic's route (Swin-L, channel-major, at the picture's own size) against the authors'
    inference at the original resolution with nobg's Swin-L from the same fp16 file, on a picture that
    is neither square nor of sides a multiple of 32 (astronaut cut to 512x450: input 512x448; every
    stage's map wider than the window, where nobg's backbone is the original)."""
    from craftai_infer.routes.birefnet_dynamic_torch import BirefnetDynamicTorch

    _torchvision_deform()
    picture = np.ascontiguousarray(np.asarray(Image.open(photos["astronaut.png"]).convert("RGB"))[:450])
    swin_l_prepared(tmp_path, "cuda", 1024, PatchOrder.CHANNEL_MAJOR, "astronaut.png")
    route = BirefnetDynamicTorch(RouteFiles({}, tmp_path, 0, gpu_precision="auto"), "cuda")
    assert route.autocast is None
    (matte,) = route.matte([picture])
    ours = matte.cpu().numpy().astype(int)
    del route
    torch.cuda.empty_cache()
    reference = birefnet_reference.reference_from_origin(tmp_path, swin_l=True).cuda()
    theirs = birefnet_reference.author_dynamic_matte(picture, _OnCuda(reference)).astype(int)
    diff = np.abs(ours - theirs)
    share = float((theirs > 127).mean())
    print(f"BiRefNet dynamic route 512x450 Swin-L: max |d| {diff.max()}, mean {diff.mean():.4f}, subject {share:.2f}")
    assert ours.shape == theirs.shape == picture.shape[:2]
    assert 0.05 < share < 0.95 and len(np.unique(theirs)) >= 64  # calibrated: not a saturated matte
    assert diff.max() <= 2 and diff.mean() <= 0.05


def test_the_dynamic_route_on_cuda_agrees_with_the_cpu_route(photos: dict[str, Path]) -> None:
    """The route on CUDA (BatchNorm folded, eager kernels) against the CPU route, on a small picture
    (chelsea: input 448x288) and one over 2304 px (coffee enlarged to 2600x1733: input 2304x1536); the
    calibrated lite checkpoint stands in (the route reads the configuration from the folder)."""
    from craftai_infer.routes.birefnet_dynamic_torch import BirefnetDynamicTorch

    files = RouteFiles({}, prepared_folder(checkpoints()["random"]), 0, gpu_precision="auto")
    cpu, cuda = BirefnetDynamicTorch(files, "cpu"), BirefnetDynamicTorch(files, "cuda")
    coffee = Image.open(photos["coffee.png"]).convert("RGB").resize((2600, 1733), Image.Resampling.BICUBIC)
    pictures = {
        "chelsea.png": np.asarray(Image.open(photos["chelsea.png"]).convert("RGB")),
        "coffee 2600": np.asarray(coffee),
    }
    for name, picture in pictures.items():
        (on_cuda,) = cuda.matte([picture])
        (on_cpu,) = cpu.matte([picture])
        assert on_cuda.device.type == "cuda" and on_cuda.shape == on_cpu.shape == picture.shape[:2]
        diff = np.abs(on_cuda.cpu().numpy().astype(int) - on_cpu.numpy().astype(int))
        print(f"BiRefNet dynamic route cuda {name}: max |d| {diff.max()}, mean {diff.mean():.4f} (of 255)")
        assert 0.02 < float((on_cpu.numpy() > 127).mean()) < 0.98
        assert diff.max() <= 2 and diff.mean() <= 0.05, name
