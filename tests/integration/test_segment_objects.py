"""image.segment beyond one click: several objects per call, the mask formats (PNG, COCO RLE,
polygons, box, area), Meta's clean-up options, and segment everything (progress, a cancel that
stops it, refusals), through the real services on the SAM fixture, and the `craftai segment`
(several boxes, --format) and `craftai segment-all` commands.

Answers are compared with the pipelines run in this process on the same files and picture (the
pipelines themselves are compared with Meta's code and pycocotools in tests/unit and tests/parity).
One server, one session on chelsea.png; the generator runs on small grids (16 to 36 points).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pycocotools.mask as coco  # type: ignore[import-untyped]
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, Prompt, SegmentSession
from craftai_dev import servers
from craftai_dev.sam_fixture import Sam21Fixture
from craftai_dev.segment import Embeddings, SetUpStore, mask_of
from craftai_infer.pipelines import mask_generator
from craftai_infer.pipelines.mask_cleanup import Cleanup
from craftai_infer.pipelines.mask_generator import Everything
from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_infer.routes.sam2_onnx import SamEmbedding, SamOnnxRunner
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import common_pb2, infer_pb2, infer_pb2_grpc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"),
]
APP = servers.app_metadata("tests")
WIDTH, HEIGHT = 451, 300  # chelsea.png
BOXES = [(10.0, 10.0, 200.0, 150.0), (220.0, 40.0, 440.0, 290.0), (120.5, 40.0, 380.0, 290.0)]
# The random-weight decoder's masks are specks over the whole picture (boxes of the full picture):
# SMALL keeps those that pass the filters (NMS at 1 drops none), DEDUP lets NMS and the clean-up work.
SMALL: dict[str, Any] = {
    "points_per_side": 4,
    "pred_iou_thresh": 0.3,
    "stability_score_thresh": 0.5,
    "box_nms_thresh": 1.0,
}
DEDUP: dict[str, Any] = {
    "points_per_side": 4,
    "pred_iou_thresh": 0.0,
    "stability_score_thresh": 0.0,
    "box_nms_thresh": 0.7,
    "min_mask_region_area": 300,
}


@pytest.fixture(scope="module")
def server(sam_torch_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """A server on the store with both routes prepared (onnxruntime's is the default on the CPU)."""
    with servers.running(sam_torch_store.serve(tmp_path_factory.mktemp("objects-server"))) as process:
        yield process


@pytest.fixture(scope="module")
def ai(server: servers.Process) -> Iterator[AiClient]:
    with AiClient(app_id="tests", target=server.address) as client:
        yield client


@pytest.fixture(scope="module")
def session(ai: AiClient, photos: dict[str, Path]) -> Iterator[SegmentSession]:
    with ai.open_session(photos["chelsea.png"]) as opened:
        yield opened


@pytest.fixture(scope="module")
def stub(server: servers.Process) -> Iterator[infer_pb2_grpc.InferServiceStub]:
    with loopback_channel(server.address) as channel:
        yield infer_pb2_grpc.InferServiceStub(channel)


@pytest.fixture(scope="module")
def local(
    sam21_files: Sam21Fixture, photos: dict[str, Path], sam_onnx_embeddings: Embeddings
) -> tuple[SamOnnxRunner, SamEmbedding]:
    runner = SamOnnxRunner(sam21_files.encoder, sam21_files.decoder, use_gpu=False)
    picture = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))
    return runner, sam_onnx_embeddings.encoded(runner, sam21_files.encoder, picture)


def _box_prompt(box: tuple[float, float, float, float]) -> SamPrompt:
    return SamPrompt(box=box)


# ------------------------------------------------------------------------------------------------
# several objects per call


def test_several_boxes_in_one_call_answer_one_mask_each(
    session: SegmentSession, local: tuple[SamOnnxRunner, SamEmbedding]
) -> None:
    runner, embedding = local
    answer = session.segment(prompts=[Prompt(box=b) for b in BOXES], low_res=True)
    assert [m.prompt_index for m in answer.masks] == [0, 1, 2] and len(answer.objects) == 3
    assert set(answer.timing_ms) == {"model", "png"}
    for box, (mask,) in zip(BOXES, answer.objects, strict=True):
        alone = session.segment(box=box, low_res=True)
        expected = runner.decode(embedding, _box_prompt(box))
        assert mask.png == alone.best.png and mask.low_res == alone.best.low_res  # as if asked one by one
        assert np.mean((mask_of(mask.png) > 0) == expected.masks[0]) >= 0.999
        assert mask.predicted_iou == pytest.approx(float(expected.ious[0]), abs=1e-4)
    assert len({m.png for m in answer.masks}) == 3


def test_objects_mix_points_boxes_and_all_masks(session: SegmentSession) -> None:
    prompts = [
        Prompt(points=[(310, 200, True)]),
        Prompt(box=BOXES[2], points=[(250, 150, True), (130, 60, False)], all_masks=True),
        Prompt(points=[(100, 100, True), (120, 110, True)]),
    ]
    answer = session.segment(prompts=prompts)
    assert [len(o) for o in answer.objects] == [1, 3, 1]
    for prompt, masks in zip(prompts, answer.objects, strict=True):
        alone = session.segment(prompt.points, prompt.box, all_masks=prompt.all_masks)
        assert [m.png for m in masks] == [m.png for m in alone.masks]
        assert [m.predicted_iou for m in masks] == pytest.approx([m.predicted_iou for m in alone.masks], abs=1e-6)


def test_segment_once_takes_several_objects(ai: AiClient, session: SegmentSession, photos: dict[str, Path]) -> None:
    once = ai.segment_once(photos["chelsea.png"], prompts=[Prompt(box=b) for b in BOXES[:2]], formats="rle")
    kept = session.segment(prompts=[Prompt(box=b) for b in BOXES[:2]], formats="rle")
    assert [m.rle for m in once.masks] == [m.rle for m in kept.masks] and once.masks[0].png == b""
    assert set(once.timing_ms) == {"decode", "encode", "model", "masks"}


# ------------------------------------------------------------------------------------------------
# formats


def test_every_format_describes_the_same_pixels(session: SegmentSession) -> None:
    answer = session.segment(box=BOXES[2], formats=["png", "rle", "polygons"], polygon_tolerance=0)
    mask = answer.best
    pixels = mask_of(mask.png) > 0
    assert mask.rle is not None and (mask.rle.height, mask.rle.width) == (HEIGHT, WIDTH)
    assert np.array_equal(mask.rle.array(), pixels) and np.array_equal(mask.array(), pixels)
    assert np.array_equal(coco.decode(mask.rle.to_coco()).astype(bool), pixels)  # COCO's own reader
    uncompressed = coco.frPyObjects({"size": [HEIGHT, WIDTH], "counts": list(mask.rle.counts)}, HEIGHT, WIDTH)
    assert uncompressed["counts"] == mask.rle.compressed
    assert mask.area == int(pixels.sum()) == int(coco.area(mask.rle.to_coco()))
    rows, cols = np.flatnonzero(pixels.any(axis=1)), np.flatnonzero(pixels.any(axis=0))
    assert mask.box == (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1)
    # Polygons at tolerance 0 run along the pixels' edges: COCO's reader (each outer ring less its
    # holes) gives the pixels back exactly.
    drawn = np.zeros((HEIGHT, WIDTH), bool)
    assert mask.polygons

    def coco_ring(ring: np.ndarray) -> np.ndarray:
        rle = coco.frPyObjects([ring.astype(np.float64).ravel().tolist()], HEIGHT, WIDTH)
        return np.asarray(coco.decode(coco.merge(rle)), dtype=bool)

    for polygon in mask.polygons:
        outer, holes = polygon.arrays()
        region = coco_ring(outer)
        for hole in holes:
            region &= ~coco_ring(hole)
        drawn |= region
    assert np.array_equal(drawn, pixels)
    coarse = session.segment(box=BOXES[2], formats="polygons", polygon_tolerance=3).best
    assert coarse.png == b"" and coarse.rle is None
    assert sum(len(p.outer) for p in coarse.polygons) < sum(len(p.outer) for p in mask.polygons)
    with pytest.raises(ValueError, match="ask for formats 'rle' or 'png'"):
        coarse.array()


def test_clean_up_is_meta_s_on_the_low_res_logits(
    session: SegmentSession, local: tuple[SamOnnxRunner, SamEmbedding]
) -> None:
    """The random-weight masks are full of specks: the clean-up changes them, exactly as the
    pipeline does in this process (which tests/unit compares with Meta's postprocess_masks)."""
    runner, embedding = local
    prompt = SamPrompt(points=[(310, 200)], labels=[1])
    plain = session.segment([(310, 200, True)], formats="rle", low_res=True).best
    for hole, sprinkle in ((40, 0), (0, 40), (60, 60)):
        cleaned = session.segment(
            [(310, 200, True)], formats="rle", max_hole_area=hole, max_sprinkle_area=sprinkle, low_res=True
        )
        expected = runner.decode(embedding, prompt, cleanup=Cleanup(hole, sprinkle)).masks[0]
        assert cleaned.best.rle is not None and np.array_equal(cleaned.best.rle.array(), expected)
        assert cleaned.best.rle != plain.rle
        assert cleaned.best.low_res == plain.low_res  # the logits answered stay the decoder's


# ------------------------------------------------------------------------------------------------
# segment everything


def _expected(
    local: tuple[SamOnnxRunner, SamEmbedding], options: dict[str, Any], batch: int
) -> tuple[mask_generator.Candidates, mask_generator.Candidates]:
    """The candidates and the answer of the pipeline in this process, on the same embedding."""
    runner, embedding = local
    settings = Everything(points_per_batch=batch, **options)
    points = mask_generator.grid_points(settings.points_per_side, HEIGHT, WIDTH)
    candidates = mask_generator.Candidates.concat(
        [runner.grid(embedding, chunk, settings) for chunk in mask_generator.batches(points, batch)]
    )
    return candidates, mask_generator.select(candidates, settings)


@pytest.mark.parametrize("options", [SMALL, DEDUP], ids=["filters", "nms-and-clean-up"])
def test_segment_everything_answers_the_pipeline_s_masks(
    options: dict[str, Any], session: SegmentSession, local: tuple[SamOnnxRunner, SamEmbedding]
) -> None:
    progress: list[common_pb2.Progress] = []
    found = session.segment_everything(points_per_batch=5, on_progress=progress.append, **options)
    candidates, expected = _expected(local, options, 5)
    assert (found.points, found.candidates, len(found.masks)) == (16, len(candidates), len(expected))
    assert len(found.masks) > 1
    if options is DEDUP:
        assert len(found.masks) < found.candidates  # NMS removed some
    assert [m.rle.counts for m in found.masks if m.rle] == [tuple(c) for c in expected.counts]
    ious = [m.predicted_iou for m in found.masks]
    assert ious == sorted(ious, reverse=True) and ious == pytest.approx(expected.ious.tolist(), abs=1e-6)
    assert [m.stability_score for m in found.masks] == pytest.approx(expected.stability.tolist(), abs=1e-6)
    for mask, point in zip(found.masks, expected.points, strict=True):
        assert mask.point is not None and (mask.point.x, mask.point.y) == pytest.approx(tuple(point))
        assert mask.png == b"" and mask.low_res_logits is None
    stages = [(p.stage, p.done, p.total, p.unit) for p in progress]
    assert stages[0] == ("model", 0, 3, "steps")
    assert [s for s in stages if s[0] == "points"] == [("points", n, 16, "points") for n in (5, 10, 15, 16)]
    assert stages[-2:] == [("select", 1, 3, "steps"), ("masks", 2, 3, "steps")]
    assert set(found.timing_ms) == {"model", "select", "masks"}


def test_segment_everything_in_other_formats(session: SegmentSession) -> None:
    every = session.segment_everything(formats=["png", "polygons", "rle"], **SMALL)
    assert len(every.masks) > 1
    for mask in every.masks:
        assert mask.rle is not None and np.array_equal(mask_of(mask.png) > 0, mask.rle.array())
        pixels = mask.rle.array()
        rows, cols = np.flatnonzero(pixels.any(axis=1)), np.flatnonzero(pixels.any(axis=0))
        assert mask.box == (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1) and mask.area == int(pixels.sum())
        assert mask.polygons and not mask.empty


def test_meta_s_defaults_keep_nothing_of_random_weights(session: SegmentSession) -> None:
    """Predicted IoUs of the random-weight decoder stay under 0.6: Meta's pred_iou_thresh 0.8 keeps none."""
    found = session.segment_everything(points_per_side=4)
    assert (found.points, found.candidates, found.masks) == (16, 0, [])


def _everything_error(
    stub: infer_pb2_grpc.InferServiceStub, request: infer_pb2.SegmentEverythingRequest
) -> CraftAiError:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.SegmentEverything(request, metadata=APP, timeout=60))
    return CraftAiError.from_rpc(caught.value)


def test_bad_options_are_refused_in_plain_words(session: SegmentSession, stub: infer_pb2_grpc.InferServiceStub) -> None:
    sid = session.session_id
    cases = [
        (infer_pb2.EverythingOptions(points_per_side=65), "TOO_MANY_POINTS", "options.points_per_side", "1 to 64"),
        (infer_pb2.EverythingOptions(points_per_batch=257), "BAD_OPTIONS", "options.points_per_batch", "1 to 256"),
        (infer_pb2.EverythingOptions(pred_iou_thresh=1.5), "BAD_OPTIONS", "options.pred_iou_thresh", "in [0, 1]"),
    ]
    for options, reason, field, words in cases:
        error = _everything_error(stub, infer_pb2.SegmentEverythingRequest(session_id=sid, options=options))
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason), error
        assert [f for f, _ in error.violations] == [field] and words in error.message, error
    cleanup = infer_pb2.MaskOutput(max_hole_area=5)
    error = _everything_error(stub, infer_pb2.SegmentEverythingRequest(session_id=sid, output=cleanup))
    assert error.reason == "BAD_OPTIONS" and "min_mask_region_area" in error.message
    error = _everything_error(stub, infer_pb2.SegmentEverythingRequest(session_id="gone"))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


def test_bad_segment_requests_are_refused(session: SegmentSession, stub: infer_pb2_grpc.InferServiceStub) -> None:
    one = infer_pb2.Prompt(points=[infer_pb2.Point(x=10, y=10, label=infer_pb2.POINT_LABEL_FOREGROUND)])
    box = infer_pb2.Prompt(box=infer_pb2.Box(x0=10, y0=10, x1=500, y1=50))
    cases = [
        (dict(prompt=one, prompts=[one]), "BAD_PROMPT", "prompts", "both prompt and prompts"),
        (dict(prompts=[one] * 65), "TOO_MANY_PROMPTS", "prompts", "65 prompts; at most 64"),
        (dict(prompts=[one, box]), "BAD_PROMPT", "prompts[1].box", "goes outside the 451x300 picture"),
        (
            dict(prompt=one, output=infer_pb2.MaskOutput(formats=[infer_pb2.MASK_FORMAT_UNSPECIFIED])),
            "BAD_OPTIONS",
            "output.formats[0]",
            "MASK_FORMAT_UNSPECIFIED",
        ),
        (
            dict(prompt=one, output=infer_pb2.MaskOutput(polygon_tolerance=-1)),
            "BAD_OPTIONS",
            "output.polygon_tolerance",
            "0 or more",
        ),
    ]
    for fields, reason, field, words in cases:
        request = infer_pb2.SegmentRequest(session_id=session.session_id, **fields)  # type: ignore[arg-type]
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Segment(request, metadata=APP, timeout=60))
        error = CraftAiError.from_rpc(caught.value)
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason), error
        assert [f for f, _ in error.violations] == [field] and words in error.message, error
    runtime = stub.GetRuntime(infer_pb2.GetRuntimeRequest(), metadata=APP, timeout=10)
    assert (runtime.limits.max_prompts, runtime.limits.max_points_per_side) == (64, 64)


def _requests(stub: infer_pb2_grpc.InferServiceStub) -> int:
    runtime = stub.GetRuntime(infer_pb2.GetRuntimeRequest(), metadata=APP, timeout=10)
    return sum(r.requests for r in runtime.loaded)


def test_a_cancelled_segment_everything_stops(session: SegmentSession, stub: infer_pb2_grpc.InferServiceStub) -> None:
    """A grid of 1,600 points, 4 per decoder call (minutes on this CPU): after two progress events
    the caller goes away; the service submits no further batch (its model request count stops)."""
    request = infer_pb2.SegmentEverythingRequest(
        session_id=session.session_id, options=infer_pb2.EverythingOptions(points_per_side=40, points_per_batch=4)
    )
    before = _requests(stub)
    call = stub.SegmentEverything(request, metadata=APP, timeout=600)
    seen = 0
    for event in call:
        if event.WhichOneof("event") == "progress" and event.progress.stage == "points":
            seen += 1
            if seen == 2:
                break
    call.cancel()
    # The batch on the worker when the call went away finishes; nothing after it. "Settled" is no new
    # request for 3 s: several batches' time on a loaded 2-core machine (a batch of 4 points takes ~1 s).
    settled, quiet_since = _requests(stub), time.monotonic()
    deadline = quiet_since + 60
    while time.monotonic() - quiet_since < 3.0 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = _requests(stub)
        if now != settled:
            settled, quiet_since = now, time.monotonic()
    time.sleep(1.5)
    assert _requests(stub) == settled
    assert settled - before < 10, (before, settled)  # of the 400 batches the whole grid needs
    assert session.segment([(310, 200, True)]).masks  # still serving


# ------------------------------------------------------------------------------------------------
# the craftai command


def _craftai(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAFTAI_ADDRESS": address}
    return subprocess.run(
        [str(servers.BIN / "craftai"), *args], check=False, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_segment_command_with_several_boxes_and_formats(
    server: servers.Process, session: SegmentSession, photos: dict[str, Path], tmp_path: Path
) -> None:
    photo = str(photos["chelsea.png"])
    boxes = [arg for b in BOXES[:2] for arg in ("--box", ",".join(f"{v:g}" for v in b))]
    run = _craftai(server.address, "segment", photo, *boxes, "-o", str(tmp_path / "two.png"))
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in tmp_path.glob("two-*.png")) == ["two-0.png", "two-1.png"]
    expected = session.segment(prompts=[Prompt(box=b) for b in BOXES[:2]])
    assert [(tmp_path / f"two-{i}.png").read_bytes() for i in (0, 1)] == [m.png for m in expected.masks]
    for fmt in ("rle",):  # polygons: the same path, checked through the SDK above
        out = tmp_path / f"masks-{fmt}.json"
        run = _craftai(server.address, "segment", photo, *boxes, "--format", fmt, "-o", str(out))
        assert run.returncode == 0, run.stderr
        document = json.loads(out.read_text())
        assert document["image"] == {"file_name": "chelsea.png", "width": WIDTH, "height": HEIGHT}
        records = document["annotations"]
        assert [r["prompt"] for r in records] == [0, 1]
        for record, mask in zip(records, expected.masks, strict=True):
            assert record["area"] == mask.area and record["bbox"][2] > 0
            if fmt == "rle":
                pixels = coco.decode(record["segmentation"]).astype(bool)
                assert np.array_equal(pixels, mask_of(mask.png) > 0)
            else:
                assert record["polygons"] and all(len(r) % 2 == 0 for r in record["segmentation"])
    run = _craftai(server.address, "segment", photo, *boxes, "--point", "5,5", "-o", str(tmp_path / "x.png"))
    assert run.returncode == 2 and "clicks go with a single --box" in run.stderr


def test_the_segment_all_command(server: servers.Process, photos: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "masks.json"
    flags = ["--points-per-side", "4", "--pred-iou-thresh", "0.3", "--stability-score-thresh", "0.5"]
    flags += ["--box-nms-thresh", "1"]
    run = _craftai(server.address, "segment-all", str(photos["chelsea.png"]), *flags, "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert " masks from 16 points (" in run.stdout and "passed the filters" in run.stdout
    records = json.loads(out.read_text())["annotations"]
    assert len(records) > 1
    for record in records:
        pixels = coco.decode(record["segmentation"])
        assert pixels.shape == (HEIGHT, WIDTH) and int(pixels.sum()) == record["area"]
        assert set(record) >= {"bbox", "predicted_iou", "stability_score", "point_coords"}
    run = _craftai(server.address, "segment-all", str(photos["chelsea.png"]), *flags, "--format", "png", "-o", str(out))
    assert run.returncode == 0, run.stderr
    pngs = json.loads(out.read_text())["annotations"]
    assert all((tmp_path / r["png"]).exists() for r in pngs) and len(pngs) == len(records)


def test_segment_all_with_one_mask_per_point(
    server: servers.Process, ai: AiClient, photos: dict[str, Path], tmp_path: Path
) -> None:
    """--single-mask (multimask_output=False): one mask per point, on either engine (onnxruntime's
    prepared decoder answers Meta's single mask too)."""
    out, photo = tmp_path / "masks.json", str(photos["chelsea.png"])
    flags = ["--points-per-side", "4", "--pred-iou-thresh", "0", "--stability-score-thresh", "0", "--single-mask"]
    list(ai.setup("image.segment", engine="torch"))
    for engine in ("onnxruntime", "torch"):
        run = _craftai(
            server.address, "segment-all", photo, *flags, "--box-nms-thresh", "1", "--engine", engine, "-o", str(out)
        )
        assert run.returncode == 0, run.stderr
        assert " masks from 16 points (16 passed the filters)" in run.stdout, (engine, run.stdout)
        assert len(json.loads(out.read_text())["annotations"]) == 16
