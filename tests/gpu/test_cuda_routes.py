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

from craftai import AiClient, Prompt
from craftai_dev import segment, servers
from craftai_dev.inspyrenet_fixture import checkpoints
from craftai_dev.masks import iou as _iou
from craftai_dev.masks import iou_matrix
from craftai_dev.sam_fixture import Sam21Fixture
from craftai_infer.pipelines import mask_formats
from craftai_models.imagenet import MEAN as IMAGENET_MEAN
from craftai_models.imagenet import STD as IMAGENET_STD
from tests.gpu.test_gpu_jpeg import jpeg

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


def _grey(png: bytes) -> npt.NDArray[np.int32]:
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.int32)


def test_u2netp_torch_route_on_cuda_equals_onnxruntime(matte_server: servers.Process, photos: dict[str, Path]) -> None:
    with AiClient(app_id="tests", target=matte_server.address) as ai:
        list(ai.setup("image.matte", "u2netp", "torch"))
        for name in ("chelsea.png", "astronaut.png", "rocket.jpg"):
            data = photos[name].read_bytes()
            ours = ai.remove_background(data, outputs="matte", recipe="u2netp", engine="torch")
            reference = ai.remove_background(data, outputs="matte", recipe="u2netp", engine="onnxruntime")
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
                pixels = segment.mask_of(x.png) > 0
                smallest = min(smallest, _iou(pixels, segment.mask_of(y.png) > 0))
                assert (x.area, x.box) == (int(pixels.sum()), mask_formats.box(pixels))  # measured on the device
        print(f"SAM torch on cuda, CRAFTAI_GPU_PRECISION={precision}: smallest per-mask IoU {smallest:.5f}")
        assert smallest >= SAM_MIN_IOU[precision]


def test_the_torch_route_on_cuda_opens_a_turned_jpeg_as_the_cpu_decoder_reads_it(
    sam_cuda_server: tuple[str, servers.Process], photos: dict[str, Path]
) -> None:
    """Through the service: a JPEG whose EXIF says "rotated 90°" opened on the torch route (its
    picture decoded on the GPU) and on the onnxruntime route (on the CPU) of the same server: the
    same turned size, and the same masks within what the decoders' few levels and the precision move."""
    precision, process = sam_cuda_server
    picture = jpeg(Image.open(photos["chelsea.png"]).convert("RGB"), 6, quality=92)
    with AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.segment", SAM, "torch"))
        ours = ai.open_session(picture, SAM, "torch")
        reference = ai.open_session(picture, SAM, "onnxruntime")
        assert (ours.width, ours.height) == (reference.width, reference.height) == (300, 451)
        smallest = 1.0
        for prompt in ({"points": [(150, 220, True)]}, {"box": (60, 100, 260, 380)}):
            a = ours.segment(**prompt).best
            b = reference.segment(**prompt).best
            smallest = min(smallest, _iou(segment.mask_of(a.png) > 0, segment.mask_of(b.png) > 0))
        print(f"turned JPEG, torch on cuda ({precision}) against onnxruntime: smallest IoU {smallest:.4f}")
        assert smallest >= 0.95


EVERYTHING: dict[str, Any] = {
    "points_per_side": 16,
    "pred_iou_thresh": 0.3,
    "stability_score_thresh": 0.5,
    "box_nms_thresh": 1.0,
}


def test_sam_several_objects_and_segment_everything_on_cuda(
    sam_cuda_server: tuple[str, servers.Process], photos: dict[str, Path]
) -> None:
    """Several boxes in one call (one decoder call, the embedding shared, the batch padded for its
    CUDA graph) answer what each box answers alone; segment everything on cuda (the filters on the
    device) finds the onnxruntime route's masks: each matched with IoU >= 0.9 for >= 95% of them,
    counts within 5%."""
    precision, process = sam_cuda_server
    picture = segment.png(Image.open(photos["chelsea.png"]).convert("RGB"))
    boxes = [(10, 10, 200, 150), (220, 40, 440, 290), (120, 40, 380, 290)]
    with AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.segment", SAM, "torch"))
        ours = ai.open_session(picture, SAM, "torch")
        reference = ai.open_session(picture, SAM, "onnxruntime")
        together = ours.segment(prompts=[Prompt(box=b) for b in boxes])
        for box, mask in zip(boxes, together.masks, strict=True):
            alone = ours.segment(box=box).best
            assert _iou(segment.mask_of(mask.png) > 0, segment.mask_of(alone.png) > 0) >= 0.999
            assert abs(mask.predicted_iou - alone.predicted_iou) <= 1e-4
        a = ours.segment_everything(**EVERYTHING)
        b = reference.segment_everything(**EVERYTHING)
        assert a.device.startswith("cuda") and len(b.masks) > 10
        overlaps = iou_matrix([m.array() for m in b.masks], [m.array() for m in a.masks], "cuda")
        matched = int((overlaps.max(axis=1, initial=0.0) >= 0.9).sum())
        print(
            f"segment everything on cuda ({precision}): {len(a.masks)} masks, onnxruntime {len(b.masks)}, "
            f"{matched} matched; server {a.server_ms:.0f} ms against {b.server_ms:.0f} ms"
        )
        assert abs(len(a.masks) - len(b.masks)) <= 0.05 * len(b.masks)
        assert matched >= 0.95 * len(b.masks)


def test_sam_single_mask_like_meta_on_cuda_graphs_equals_the_cpu(
    sam21_files: Sam21Fixture, photos: dict[str, Path]
) -> None:
    """Meta's single-mask answer (decode_single, its own CUDA graphs) on the GPU, fp32, against the same
    runner on the CPU: astronaut.png takes token 0 on this fixture, chelsea.png falls back (the
    parity with Meta's predictor is tests/parity/test_sam_single_mask.py); a batch mixing both kinds
    of prompt answers what each gets alone."""
    from craftai_infer.pipelines.segment_sam import SamPrompt
    from craftai_infer.routes.sam2_torch import SamTorchRunner
    from craftai_models.sam2.model import build_sam21_tiny
    from craftai_prepare.converters import sam21

    state = sam21.convert(sam21.load_onnx(sam21_files.encoder), sam21.load_onnx(sam21_files.decoder))
    cpu = SamTorchRunner(build_sam21_tiny(state), "cpu")
    gpu = SamTorchRunner(build_sam21_tiny(state).to("cuda"), "cuda")  # fp32 encoder, CUDA graphs
    smallest, largest_iou_diff = 1.0, 0.0
    for name in ("astronaut.png", "chelsea.png"):
        picture = np.asarray(Image.open(photos[name]).convert("RGB"))
        h, w = picture.shape[:2]
        with torch.inference_mode():
            on_cpu, on_gpu = cpu.encode(picture), gpu.encode(picture)
        prompts = [
            SamPrompt([(0.55 * w, 0.45 * h)], [1], single_mask_like_meta=True),
            SamPrompt([(0.3 * w, 0.6 * h), (0.9 * w, 0.1 * h)], [1, 0], single_mask_like_meta=True),
            SamPrompt(box=(0.2 * w, 0.15 * h, 0.8 * w, 0.9 * h), single_mask_like_meta=True),
        ]
        for prompt in prompts:
            for _ in range(2):  # the capture, then a replay
                a, b = gpu.decode(on_gpu, prompt), cpu.decode(on_cpu, prompt)
                smallest = min(smallest, _iou(a.masks[0], b.masks[0]))
                largest_iou_diff = max(largest_iou_diff, abs(float(a.ious[0]) - float(b.ious[0])))
        mixed = [(on_gpu, prompts[0], False), (on_gpu, SamPrompt([(0.55 * w, 0.45 * h)], [1]), False)]
        together = gpu.decode_batch(mixed)
        for (embedding, prompt, _), answer in zip(mixed, together, strict=True):
            assert np.array_equal(answer.masks, gpu.decode(embedding, prompt).masks)
    print(
        f"SAM single mask like Meta, CUDA graphs vs CPU: smallest IoU {smallest:.5f}, max |dIoU| {largest_iou_diff:.1e}"
    )
    # the predicted IoU through a different summation order (H200, 2026-12-01: 1.3e-4)
    assert smallest >= 0.999 and largest_iou_diff <= 1e-3


@pytest.mark.parametrize(("multimask", "points_per_batch"), [(True, 128), (False, 64)])
def test_sam_compiled_grid_decoder_finds_the_uncompiled_candidates(
    sam21_files: Sam21Fixture, photos: dict[str, Path], multimask: bool, points_per_batch: int
) -> None:
    """The grid's fp16 decoder through torch.compile (CRAFTAI_GPU_COMPILE's default) against the
    same runner uncompiled: it compiled (no fall-back), and 100 points keep the same candidates
    (each with IoU >= 0.99 to one of the uncompiled ones) whether they come as batches of 64 and 36
    or as one batch of 100 (compiled: calls of 64, the second padded; uncompiled: one of 128).
    Multimask runs first: the one-mask grid once answered the multimask graph compiled before it."""
    from craftai_infer.masks import decode_counts
    from craftai_infer.pipelines import mask_generator
    from craftai_infer.routes.sam2_torch import SamTorchRunner
    from craftai_models.sam2.model import build_sam21_tiny
    from craftai_prepare.converters import sam21

    state = sam21.convert(sam21.load_onnx(sam21_files.encoder), sam21.load_onnx(sam21_files.decoder))
    runners = {
        compiled: SamTorchRunner(
            build_sam21_tiny(state).to("cuda"), "cuda", grid_autocast=torch.float16, compile_grid=compiled
        )
        for compiled in (True, False)
    }
    picture = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))
    h, w = picture.shape[:2]
    settings = mask_generator.Everything(
        points_per_side=10,
        points_per_batch=points_per_batch,
        pred_iou_thresh=0.3,
        stability_score_thresh=0.5,
        multimask_output=multimask,
    )
    points = mask_generator.grid_points(settings.points_per_side, h, w)
    found: dict[bool, list[npt.NDArray[np.bool_]]] = {}
    for compiled, runner in runners.items():
        embedding = runner.encode(picture)
        found[compiled] = [
            decode_counts(c, h, w)
            for chunk in mask_generator.batches(points, settings.points_per_batch)
            for c in runner.grid(embedding, chunk, settings).counts
        ]
    # the one-mask grid decoder, and the multimask grid's two steps (attend, predict_masks)
    assert len(runners[True].compiled) == 3 and not any(fn.fell_back for fn in runners[True].compiled)
    a, b = found[True], found[False]
    overlaps = iou_matrix(b, a, "cuda")
    matched = int((overlaps.max(axis=1, initial=0.0) >= 0.99).sum())
    print(
        f"compiled grid decoder (multimask {multimask}, points_per_batch {points_per_batch}): {len(a)} candidates, "
        f"uncompiled {len(b)}, {matched} matched"
    )
    assert len(b) > 10
    assert abs(len(a) - len(b)) <= max(1, 0.01 * len(b)) and matched >= 0.99 * len(b)


def test_sam_under_load_replays_only_what_the_warm_up_captured(
    sam21_files: Sam21Fixture, photos: dict[str, Path]
) -> None:
    """A capture synchronises the device and collects garbage, and every caller of the GPU waits for
    it: the shapes a service meets with the default settings (encoder batches of 1 to 8 pictures, a
    click, segment everything's batches of 64 points and a call of GRID_CALL of them on one
    picture) are all captured by the warm-up, so that none is captured under load."""
    from craftai_infer.pipelines import mask_generator
    from craftai_infer.pipelines.segment_sam import SamPrompt
    from craftai_infer.routes.sam2_torch import ENCODER_BATCHES, GRID_CALL, SamTorchRunner
    from craftai_models.sam2.model import build_sam21_tiny
    from craftai_prepare.converters import sam21

    state = sam21.convert(sam21.load_onnx(sam21_files.encoder), sam21.load_onnx(sam21_files.decoder))
    runner = SamTorchRunner(
        build_sam21_tiny(state).to("cuda"), "cuda", encoder_autocast=torch.float16, grid_autocast=torch.float16
    )
    runner.warm_up()

    def captured() -> dict[str, int]:
        caches = {
            "encoder": runner._encoder_graphs,
            "decoder": runner._decoders[False, False].graphs,
            "attend": runner._attend.graphs,
            "predict_masks": runner._predict_masks.graphs,
        }
        return {name: len(cache) for name, cache in caches.items() if cache is not None}

    warm = captured()
    assert warm["encoder"] == len(ENCODER_BATCHES) and len(warm) == 4
    # Meta's grid (32 points a side, batches of 64); thresholds that the random weights pass
    settings = mask_generator.Everything(pred_iou_thresh=0.3, stability_score_thresh=0.5)
    found = 0
    for name in ("chelsea.png", "astronaut.png"):
        picture = np.asarray(Image.open(photos[name]).convert("RGB"))
        embeddings = [runner.encode_batch([picture] * size)[0] for size in ENCODER_BATCHES]
        runner.decode(embeddings[0], SamPrompt(points=[(50.0, 40.0)], labels=[1]))
        points = mask_generator.grid_points(settings.points_per_side, *picture.shape[:2])
        chunks = mask_generator.batches(points, settings.points_per_batch)
        for start in range(0, len(chunks), GRID_CALL):
            calls = [(embeddings[-1], chunk, settings) for chunk in chunks[start : start + GRID_CALL]]
            found += sum(len(c.counts) for c in runner.grid_batches(calls))
    print(f"graphs captured at warm-up: {warm}; {found} grid candidates found after it")
    assert found > 0  # the grid's second step ran
    assert captured() == warm


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
            answer = ai.remove_background(data, outputs="matte", recipe="inspyrenet-swinb")
        assert answer.device[:4] == ("cpu" if name == "cpu" else "cuda"), name
        mattes[name] = _grey(answer.matte_png)
    # The randomised checkpoint's matte is one value everywhere: what this shows is that each
    # server answers from its device at the picture's size, the same as the CPU.
    for name in ("fp32", "auto"):
        assert mattes[name].shape == mattes["cpu"].shape == (300, 451)
        assert np.array_equal(mattes[name], mattes["cpu"]), name
