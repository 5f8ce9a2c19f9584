"""Every torch route on the GPU, through the services, against a reference run in the same test:
u2netp (real file) against the onnxruntime route, SAM 2.1 tiny (random-weight fixture) against the
onnxruntime route, InSPyReNet (randomised checkpoint) against the same service on the CPU.

GPU only (CI has none and skips them with a reason); run on the lent GPU machine with
`bash tools/gpu/run_tests.sh`. The tolerances are those of docs/PERFORMANCE.md: the fp32 routes
agree with their reference to rounding; the reduced-precision defaults (fp16 SAM encoder, bf16
InSPyReNet) within what the GPU checks measured, and each test prints what it found."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from PIL import Image

from craftai import AiClient
from craftai_models.imagenet import MEAN as IMAGENET_MEAN
from craftai_models.imagenet import STD as IMAGENET_STD
from tests.support import segment, servers
from tests.support.inspyrenet_fixture import checkpoints

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
SAM = "sam2-hiera-tiny"
PROMPTS = [
    {"points": [(220, 150, True)]},
    {"points": [(220, 150, True), (40, 30, False)]},
    {"box": (100, 60, 380, 260)},
    {"points": [(250, 170, True)], "box": (100, 60, 380, 260)},
]
# smallest per-mask IoU against the onnxruntime fp32 route, by CRAFTAI_GPU_PRECISION
SAM_MIN_IOU = {"fp32": 0.999, "auto": 0.98}


def _iou(a: npt.NDArray[np.bool_], b: npt.NDArray[np.bool_]) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def _grey(png: bytes) -> npt.NDArray[np.int32]:
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.int32)


def test_u2netp_torch_route_on_cuda_equals_onnxruntime(matte_server: servers.Process, photos: dict[str, Path]) -> None:
    with AiClient(app_id="tests", target=matte_server.address) as ai:
        list(ai.setup("image.matte", "u2netp", "torch"))
        for name in ("chelsea.png", "astronaut.png", "rocket.jpg"):
            data = photos[name].read_bytes()
            ours = ai.remove_background(data, recipe="u2netp", engine="torch")
            reference = ai.remove_background(data, recipe="u2netp", engine="onnxruntime")
            assert (ours.engine, ours.device[:4], reference.engine) == ("torch", "cuda", "onnxruntime")
            diff = np.abs(_grey(ours.matte_png) - _grey(reference.matte_png))
            print(f"u2netp {name}: max |d| {diff.max()}, mean {diff.mean():.4f} (of 255)")
            assert diff.max() <= 1, name


@pytest.fixture(scope="module", params=["fp32", "auto"])
def sam_cuda_server(
    request: pytest.FixtureRequest, sam_store: segment.SetUpStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, servers.Process]]:
    root = tmp_path_factory.mktemp(f"sam-cuda-{request.param}")
    shutil.copytree(sam_store.store, root / "store")
    process = segment.SetUpStore(root / "store", sam_store.recipes).serve(
        root, {"CRAFTAI_GPU_PRECISION": request.param}
    )
    with servers.running(process):
        yield request.param, process


def test_sam_torch_route_on_cuda_agrees_with_onnxruntime(
    sam_cuda_server: tuple[str, servers.Process], photos: dict[str, Path]
) -> None:
    precision, process = sam_cuda_server
    picture = segment.png(Image.open(photos["chelsea.png"]).convert("RGB"))
    with AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.segment", SAM, "torch"))
        ours = ai.open_session(picture, SAM, "torch")
        reference = ai.open_session(picture, SAM, "onnxruntime")
        assert (ours.device[:4], reference.engine) == ("cuda", "onnxruntime")
        smallest = 1.0
        for prompt in PROMPTS:
            a = ours.segment(**prompt, all_masks=True)  # type: ignore[arg-type]
            b = reference.segment(**prompt, all_masks=True)  # type: ignore[arg-type]
            assert a.device.startswith("cuda")
            for x, y in zip(a.masks, b.masks, strict=True):
                smallest = min(smallest, _iou(segment.mask_of(x.png) > 0, segment.mask_of(y.png) > 0))
        print(f"SAM torch on cuda, CRAFTAI_GPU_PRECISION={precision}: smallest per-mask IoU {smallest:.5f}")
        assert smallest >= SAM_MIN_IOU[precision]


def _stages(network: Any, x: torch.Tensor, autocast: torch.dtype | None) -> list[torch.Tensor]:
    with torch.inference_mode(), torch.autocast(x.device.type, dtype=autocast or torch.float32, enabled=bool(autocast)):
        stages = network.stages(x)
    return [d.float().cpu() for d in stages.saliency]


def test_inspyrenet_network_on_cuda_agrees_with_the_cpu(photos: dict[str, Path]) -> None:
    """The network as the route runs it on the GPU (BatchNorm folded, channels-last; fp32, then the
    default bf16 autocast) against the CPU in fp32, stage by stage. The randomised checkpoint's later
    saliency maps grow to ~1e8 (its matte saturates: every pixel the same), so the comparison is of
    the saliency logits, relative to each map's range, not of the mattes."""
    from craftai_infer import device
    from craftai_infer.routes.inspyrenet_torch import GPU_DEFAULT
    from craftai_models.inspyrenet import fold_batchnorm, load_inspyrenet

    assert device.detect("auto").gpu_available  # and fp32 made strict, as in the service
    made = checkpoints()["random"]
    pin = made.pin
    base = (384, 384)
    rgb = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB").resize(base), dtype=np.float32)
    x = torch.from_numpy(rgb).permute(2, 0, 1)[None] / 255
    x = (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    reference = _stages(load_inspyrenet(made.path, "cpu", base_size=base, pin=pin), x, None)
    gpu = load_inspyrenet(made.path, "cuda", base_size=base, pin=pin)
    fold_batchnorm(gpu)
    gpu.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    x_gpu = x.cuda().contiguous(memory_format=torch.channels_last)
    for precision, autocast in (("fp32", None), ("default", GPU_DEFAULT)):
        found = _stages(gpu, x_gpu, autocast)
        for level, (ours, theirs) in enumerate(zip(found, reference, strict=True)):
            relative = float((ours - theirs).abs().max() / theirs.abs().max())
            correlation = float(np.corrcoef(ours.flatten().numpy(), theirs.flatten().numpy())[0, 1])
            print(
                f"InSPyReNet {precision} saliency d{3 - level}: max |d| / max |ref| {relative:.2e}, r {correlation:.6f}"
            )
            if precision == "fp32":
                assert relative <= 1e-3, (precision, level)
            else:
                assert correlation >= 0.99, (precision, level)


def test_inspyrenet_service_answers_from_cuda(
    inspyrenet_servers: dict[str, servers.Process], photos: dict[str, Path]
) -> None:
    data = photos["chelsea.png"].read_bytes()
    mattes = {}
    for name, process in inspyrenet_servers.items():
        with AiClient(app_id="tests", target=process.address) as ai:
            answer = ai.remove_background(data, recipe="inspyrenet-swinb")
        assert answer.device[:4] == ("cpu" if name == "cpu" else "cuda"), name
        mattes[name] = _grey(answer.matte_png)
    # The randomised checkpoint's matte is one value everywhere: what this shows is that each
    # server answers from its device at the picture's size, the same as the CPU.
    for name in ("fp32", "auto"):
        assert mattes[name].shape == mattes["cpu"].shape == (300, 451)
        assert np.array_equal(mattes[name], mattes["cpu"]), name
