"""image.segment through the real services: a session on a real photo (points, box, box + points,
mask feedback, all masks), empty answers, SegmentOnce, app scoping, every refusal in plain words
with its reason and field, and the `craftai segment` command.

The route is the SAM 2.1 fixture (random weights, the published contract) pinned by a test
catalogue and set up by the real prepare service (`sam_store` in tests/conftest.py). Answers are
compared with the pipeline run in this process on the same files, so every step between the
wire and the model (coordinates, labels, box order, mask feedback, ordering) is checked; the
pipeline itself is compared with Meta's predictor in tests/parity/. Each encoder run costs
seconds here: one session on one photo serves most tests.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, LowResMask, Point, SegmentOutput, SegmentSession
from craftai_dev import catalogues, servers
from craftai_dev.sam_fixture import Sam21Fixture
from craftai_dev.segment import Embeddings, SetUpStore, mask_of, png
from craftai_infer.pipelines.segment_sam import SamMasks, SamPrompt
from craftai_infer.routes.sam2_onnx import SamEmbedding, SamOnnxRunner
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import common_pb2, infer_pb2, infer_pb2_grpc

pytestmark = pytest.mark.slow
APP = servers.app_metadata("tests")
WIDTH, HEIGHT = 451, 300  # chelsea.png


@pytest.fixture(scope="module")
def server(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    with servers.running(sam_store.serve(tmp_path_factory.mktemp("segment-server"))) as process:
        yield process


@pytest.fixture(scope="module")
def ai(server: servers.Process) -> Iterator[AiClient]:
    with AiClient(app_id="tests", target=server.address) as client:
        yield client


@pytest.fixture(scope="module")
def stub(server: servers.Process) -> Iterator[infer_pb2_grpc.InferServiceStub]:
    with loopback_channel(server.address) as channel:
        yield infer_pb2_grpc.InferServiceStub(channel)


@dataclass
class Opened:
    session: SegmentSession
    progress: list[common_pb2.Progress]


@pytest.fixture(scope="module")
def opened(ai: AiClient, photos: dict[str, Path]) -> Iterator[Opened]:
    """One session on chelsea.png, the first request of this server (so it also loads the route)."""
    progress: list[common_pb2.Progress] = []
    with ai.open_session(photos["chelsea.png"], on_progress=progress.append) as session:
        yield Opened(session, progress)


@dataclass
class Local:
    """The same files and pipeline in this process, on the same picture."""

    runner: SamOnnxRunner
    embedding: SamEmbedding

    def answer(self, prompt: SamPrompt, *, all_masks: bool = False) -> SamMasks:
        return self.runner.decode(self.embedding, prompt, all_masks=all_masks)


@pytest.fixture(scope="module")
def local(sam21_files: Sam21Fixture, photos: dict[str, Path], sam_onnx_embeddings: Embeddings) -> Local:
    runner = SamOnnxRunner(sam21_files.encoder, sam21_files.decoder, use_gpu=False)
    picture = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))
    return Local(runner, sam_onnx_embeddings.encoded(runner, sam21_files.encoder, picture))


def _logits(mask: LowResMask) -> npt.NDArray[np.float32]:
    assert (mask.width, mask.height, len(mask.logits)) == (256, 256, 256 * 256 * 4)
    return np.frombuffer(mask.logits, dtype="<f4").reshape(256, 256)


def _same_as_local(answer: SegmentOutput, expected: SamMasks) -> None:
    """The service's answer is the pipeline's: masks, scores, low-res logits and empty flags."""
    assert len(answer.masks) == len(expected.ious)
    for k, mask in enumerate(answer.masks):
        pixels = mask_of(mask.png)
        assert pixels.shape == (answer.height, answer.width)
        agree = float(np.mean((pixels > 0) == expected.masks[k]))
        assert agree >= 0.999, (k, agree)
        assert mask.predicted_iou == pytest.approx(float(expected.ious[k]), abs=1e-4)
        np.testing.assert_allclose(_logits(mask.low_res), expected.low_res[k], atol=1e-3)
        assert mask.selected_fraction == pytest.approx(float(np.mean(pixels > 0)), abs=1e-6)  # float32
        assert mask.empty == (not pixels.any())


# ------------------------------------------------------------------------------------------------
# a session


def test_open_session_loads_decodes_and_encodes_once(opened: Opened) -> None:
    s = opened.session
    assert [p.stage for p in opened.progress] == ["load", "load", "decode", "encode"]
    assert s.session_id and (s.width, s.height) == (WIDTH, HEIGHT)
    assert (s.recipe, s.engine, s.device) == ("sam2.1-hiera-tiny", "onnxruntime", "cpu")  # the default (issue 15)
    assert s.idle_seconds == 900 and set(s.timing_ms) == {"decode", "encode"}


PROMPTS: dict[str, tuple[list[Point], tuple[float, float, float, float] | None]] = {
    "one click": ([Point(310, 200)], None),
    "clicks in and out": ([Point(310, 200), Point(40, 40, foreground=False)], None),
    "a box": ([], (120.5, 40, 380, 290)),
    "a box and clicks": ([Point(250, 150), Point(130, 60, foreground=False)], (120.5, 40, 380, 290)),
    "the whole picture as a box, corners on the edges": ([], (0, 0, WIDTH, HEIGHT)),
}


def _sam_prompt(points: list[Point], box: tuple[float, float, float, float] | None, **kw: object) -> SamPrompt:
    return SamPrompt(
        points=[(p.x, p.y) for p in points],
        labels=[1 if p.foreground else 0 for p in points],
        box=box,
        **kw,  # type: ignore[arg-type]
    )


def test_points_box_and_box_with_points(opened: Opened, local: Local) -> None:
    answers = {}
    for name, (points, box) in PROMPTS.items():
        answer = opened.session.segment(points=points, box=box, low_res=True)
        assert len(answer.masks) == 1 and answer.session_id == opened.session.session_id, name
        assert set(answer.timing_ms) == {"model", "png"} and not answer.reopened
        _same_as_local(answer, local.answer(_sam_prompt(points, box)))
        answers[name] = answer.best.png
    assert len(set(answers.values())) == len(answers)  # each prompt selects something else


def test_tuples_and_points_are_the_same_prompt(opened: Opened) -> None:
    a = opened.session.segment(points=[(310, 200, True), (40, 40, False)], low_res=True)
    b = opened.session.segment(points=[Point(310, 200), Point(40, 40, foreground=False)], low_res=True)
    assert a.best.png == b.best.png and a.best.predicted_iou == b.best.predicted_iou


def test_a_previous_answer_fed_back_refines_the_next(opened: Opened, local: Local) -> None:
    first = opened.session.segment(points=[Point(310, 200)], low_res=True)
    points = [Point(310, 200), Point(200, 120)]
    fed = opened.session.segment(points=points, mask_input=first.best.low_res, low_res=True)
    previous = _logits(first.best.low_res).copy()
    _same_as_local(fed, local.answer(_sam_prompt(points, None, mask_input=previous)))
    as_bytes = opened.session.segment(points=points, mask_input=first.best.low_res.logits, low_res=True)
    assert as_bytes.best.png == fed.best.png
    unfed = opened.session.segment(points=points, low_res=True)
    assert not np.array_equal(_logits(unfed.best.low_res), _logits(fed.best.low_res))


def test_all_masks_come_best_first(opened: Opened, local: Local) -> None:
    points, box = PROMPTS["a box and clicks"]
    every = opened.session.segment(points=points, box=box, all_masks=True, low_res=True)
    scores = [m.predicted_iou for m in every.masks]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    _same_as_local(every, local.answer(_sam_prompt(points, box), all_masks=True))
    best = opened.session.segment(points=points, box=box, low_res=True)
    assert best.best.png == every.masks[0].png and best.best.predicted_iou == every.masks[0].predicted_iou
    assert len({m.png for m in every.masks}) == 3


def test_low_res_logits_come_only_when_asked(opened: Opened) -> None:
    """Each mask's low-res logits are 256 KiB that most calls never feed back: answered only with
    low_res=True; without, the SDK says how to ask before a caller feeds back nothing."""
    plain = opened.session.segment(points=[(310, 200, True)], all_masks=True)
    asked = opened.session.segment(points=[(310, 200, True)], all_masks=True, low_res=True)
    assert [m.png for m in plain.masks] == [m.png for m in asked.masks]
    assert all(m.low_res_logits is None for m in plain.masks)
    assert all(len(m.low_res.logits) == 256 * 256 * 4 for m in asked.masks)
    with pytest.raises(ValueError, match="low_res=True"):
        plain.best.low_res  # noqa: B018 - the property raises


def test_an_empty_mask_is_an_answer_not_an_error(ai: AiClient, photos: dict[str, Path]) -> None:
    """On a 2x2 picture, one of the three candidates of the fixture's decoder selects no pixel
    (its logits are negative at the four pixel centres): answered with empty = true."""
    tiny = Image.open(photos["chelsea.png"]).convert("RGB").resize((2, 2), Image.Resampling.BOX)
    answer = ai.segment_once(png(tiny), points=[(1, 1, True)], all_masks=True, low_res=True)
    empty = [m for m in answer.masks if m.empty]
    assert empty and len(empty) < 3, [(m.empty, m.selected_fraction) for m in answer.masks]
    for mask in answer.masks:
        pixels = mask_of(mask.png)
        assert pixels.shape == (2, 2) and len(mask.low_res.logits) == 256 * 256 * 4
        if mask.empty:
            assert mask.selected_fraction == 0.0 and not pixels.any()
        else:
            assert mask.selected_fraction > 0 and pixels.any()


def test_segment_once_answers_what_a_session_answers(ai: AiClient, opened: Opened, photos: dict[str, Path]) -> None:
    points, box = PROMPTS["a box and clicks"]
    once = ai.segment_once(photos["chelsea.png"], points=points, box=box, all_masks=True, low_res=True)
    kept = opened.session.segment(points=points, box=box, all_masks=True, low_res=True)
    assert once.session_id == "" and set(once.timing_ms) == {"decode", "encode", "model", "png"}
    _same_masks(once, kept)
    assert [m.predicted_iou for m in once.masks] == [m.predicted_iou for m in kept.masks]


def test_an_array_of_pixels_is_the_same_picture_as_its_file(
    ai: AiClient, opened: Opened, photos: dict[str, Path]
) -> None:
    """What an app holding decoded pixels sends (a binary PPM, craftai.pictures): the same answer."""
    points, box = PROMPTS["a box and clicks"]
    pixels = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))
    once = ai.segment_once(pixels, points=points, box=box, all_masks=True, low_res=True)
    kept = opened.session.segment(points=points, box=box, all_masks=True, low_res=True)
    assert (once.width, once.height) == (WIDTH, HEIGHT)
    _same_masks(once, kept)


def _same_masks(once: SegmentOutput, kept: SegmentOutput) -> None:
    """The same masks, byte for byte; where they are not, the failure says whether the pixels, the
    logits or only the PNG's bytes differ (these once failed under a full suite's load only)."""
    assert len(once.masks) == len(kept.masks)
    for k, (a, b) in enumerate(zip(once.masks, kept.masks, strict=True)):
        if a.png == b.png and a.low_res == b.low_res:
            continue
        pixels_a, pixels_b = mask_of(a.png), mask_of(b.png)
        logits = [np.frombuffer(m.low_res.logits, "<f4") if m.low_res else np.zeros(0) for m in (a, b)]
        apart = float(np.abs(logits[0] - logits[1]).max()) if logits[0].shape == logits[1].shape else -1.0
        pytest.fail(
            f"mask {k}: {int((pixels_a != pixels_b).sum())} pixels differ, logits at most {apart} apart, "
            f"predicted IoU {a.predicted_iou} and {b.predicted_iou}, PNGs of {len(a.png)} and {len(b.png)} bytes"
        )


# ------------------------------------------------------------------------------------------------
# app scoping and closing


def _segment_error(
    stub: infer_pb2_grpc.InferServiceStub, session_id: str, app: str = "tests", prompt: infer_pb2.Prompt | None = None
) -> CraftAiError:
    prompt = prompt or infer_pb2.Prompt(points=[infer_pb2.Point(x=10, y=10, label=infer_pb2.POINT_LABEL_FOREGROUND)])
    request = infer_pb2.SegmentRequest(session_id=session_id, prompt=prompt)
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Segment(request, metadata=servers.app_metadata(app), timeout=60))
    return CraftAiError.from_rpc(caught.value)


def test_two_apps_never_see_each_others_sessions(
    server: servers.Process, opened: Opened, stub: infer_pb2_grpc.InferServiceStub, photos: dict[str, Path]
) -> None:
    with AiClient(app_id="other-app", target=server.address) as other:
        with other.open_session(photos["chelsea.png"]) as theirs:
            assert theirs.session_id != opened.session.session_id
            for session_id, app in ((theirs.session_id, "tests"), (opened.session.session_id, "other-app")):
                error = _segment_error(stub, session_id, app)
                assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
                assert "is not open for this app" in error.message
                closing = infer_pb2.CloseSessionRequest(session_id=session_id)
                assert not stub.CloseSession(closing, metadata=servers.app_metadata(app), timeout=10).closed
            assert not theirs.segment(points=[(10, 10, True)]).reopened  # neither was closed by the other app
            assert not opened.session.segment(points=[(10, 10, True)]).reopened
            kept_id = theirs.session_id
        # Leaving the `with` closed it: the id is gone for its own app too, and closing again says so.
        error = _segment_error(stub, kept_id, "other-app")
        assert error.code == grpc.StatusCode.NOT_FOUND
        closing = infer_pb2.CloseSessionRequest(session_id=kept_id)
        assert not stub.CloseSession(closing, metadata=servers.app_metadata("other-app"), timeout=10).closed


# ------------------------------------------------------------------------------------------------
# refusals


def _point(x: float, y: float, label: int = infer_pb2.POINT_LABEL_FOREGROUND) -> infer_pb2.Point:
    return infer_pb2.Point(x=x, y=y, label=label)  # type: ignore[arg-type]


def _mask(width: int = 256, height: int = 256, values: float = 0.0, size: int | None = None) -> infer_pb2.LowResMask:
    count = size if size is not None else width * height
    return infer_pb2.LowResMask(logits=np.full(count, values, dtype="<f4").tobytes(), width=width, height=height)


ONE = [_point(10, 10)]
BAD_PROMPTS: dict[str, tuple[infer_pb2.Prompt, str, str, str]] = {
    # name: (prompt, reason, field, words in the message)
    "a point right of the picture": (
        infer_pb2.Prompt(points=[_point(10, 10), _point(451.5, 10)]),
        "BAD_PROMPT",
        "prompt.points[1]",
        "point 1 (451.5, 10) is outside the 451x300 picture",
    ),
    "a point above the picture": (
        infer_pb2.Prompt(points=[_point(10, -1)]),
        "BAD_PROMPT",
        "prompt.points[0]",
        "and y in [0, 300]",
    ),
    "a NaN coordinate": (
        infer_pb2.Prompt(points=[_point(float("nan"), 10)]),
        "BAD_PROMPT",
        "prompt.points[0]",
        "not a finite number",
    ),
    "an infinite coordinate": (
        infer_pb2.Prompt(points=[_point(10, float("inf"))]),
        "BAD_PROMPT",
        "prompt.points[0]",
        "not a finite number",
    ),
    "an unspecified label": (
        infer_pb2.Prompt(points=[*ONE, _point(5, 5, infer_pb2.POINT_LABEL_UNSPECIFIED)]),
        "BAD_PROMPT",
        "prompt.points[1].label",
        "point 1 has POINT_LABEL_UNSPECIFIED",
    ),
    "an unknown label number": (
        infer_pb2.Prompt(points=[_point(5, 5, 7)]),
        "BAD_PROMPT",
        "prompt.points[0].label",
        "point 0 has label number 7",
    ),
    "more points than the limit": (
        infer_pb2.Prompt(points=ONE * 65),
        "TOO_MANY_POINTS",
        "prompt.points",
        "the prompt has 65 points; at most 64 are accepted",
    ),
    "a box with no area": (
        infer_pb2.Prompt(box=infer_pb2.Box(x0=10, y0=10, x1=10, y1=50)),
        "BAD_PROMPT",
        "prompt.box",
        "has no area",
    ),
    "a box with inverted corners": (
        infer_pb2.Prompt(box=infer_pb2.Box(x0=100, y0=100, x1=50, y1=150)),
        "BAD_PROMPT",
        "prompt.box",
        "the box (100, 100, 50, 150) has inverted corners",
    ),
    "a box upside down": (
        infer_pb2.Prompt(box=infer_pb2.Box(x0=10, y0=100, x1=50, y1=20)),
        "BAD_PROMPT",
        "prompt.box",
        "inverted corners",
    ),
    "a box outside the picture": (
        infer_pb2.Prompt(box=infer_pb2.Box(x0=10, y0=10, x1=452, y1=50)),
        "BAD_PROMPT",
        "prompt.box",
        "goes outside the 451x300 picture",
    ),
    "a box with a NaN": (
        infer_pb2.Prompt(box=infer_pb2.Box(x0=10, y0=10, x1=float("nan"), y1=50)),
        "BAD_PROMPT",
        "prompt.box",
        "not a finite number",
    ),
    "nothing to segment": (infer_pb2.Prompt(), "BAD_PROMPT", "prompt", "give at least one point or a box"),
    "a mask alone": (
        infer_pb2.Prompt(mask_input=_mask()),
        "BAD_PROMPT",
        "prompt",
        "a mask_input alone is not a prompt",
    ),
    "a mask of the wrong size": (
        infer_pb2.Prompt(points=ONE, mask_input=_mask(128, 128)),
        "BAD_PROMPT",
        "prompt.mask_input",
        "got 128x128 with 65,536 bytes",
    ),
    "a mask with too few bytes": (
        infer_pb2.Prompt(points=ONE, mask_input=_mask(size=1000)),
        "BAD_PROMPT",
        "prompt.mask_input",
        "256x256 float32 (262,144 bytes); got 256x256 with 4,000 bytes",
    ),
    "a mask holding NaN": (
        infer_pb2.Prompt(points=ONE, mask_input=_mask(values=float("nan"))),
        "BAD_PROMPT",
        "prompt.mask_input",
        "not finite",
    ),
}


def _still_serving(session: SegmentSession) -> None:
    answer = session.segment(points=[(310, 200, True)])
    assert answer.masks and not answer.reopened


@pytest.mark.parametrize("name", list(BAD_PROMPTS))
def test_bad_prompts_are_refused_in_plain_words(
    name: str, opened: Opened, stub: infer_pb2_grpc.InferServiceStub
) -> None:
    prompt, reason, field, words = BAD_PROMPTS[name]
    error = _segment_error(stub, opened.session.session_id, prompt=prompt)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason), error
    assert words in error.message, error.message
    assert [f for f, _ in error.violations] == [field]
    _still_serving(opened.session)


def test_unknown_sessions_are_not_found(opened: Opened, stub: infer_pb2_grpc.InferServiceStub) -> None:
    for session_id, words in (("no-such-session", "session no-such-session is not open"), ("", "names no session")):
        error = _segment_error(stub, session_id)
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
        assert words in error.message
    _still_serving(opened.session)


def _stream_error(call: Callable[[], object]) -> CraftAiError:
    with pytest.raises(grpc.RpcError) as caught:
        list(call())  # type: ignore[call-overload]
    return CraftAiError.from_rpc(caught.value)


PICTURES: dict[str, tuple[bytes, grpc.StatusCode, str, str]] = {
    "over the side limit": (
        png(Image.new("L", (16385, 1))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "PICTURE_TOO_LARGE",
        "the picture is 16385x1 pixels",
    ),
    "empty": (b"", grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_PICTURE", "the picture is empty"),
    "not a picture": (b"GIF89a....", grpc.StatusCode.INVALID_ARGUMENT, "BAD_PICTURE", "not a PNG, JPEG or WebP"),
}


@pytest.mark.parametrize("name", list(PICTURES))
def test_bad_pictures_are_refused_before_the_encoder(
    name: str, opened: Opened, stub: infer_pb2_grpc.InferServiceStub
) -> None:
    data, code, reason, words = PICTURES[name]
    picture = common_pb2.Picture(data=data)
    prompt = infer_pb2.Prompt(points=ONE)
    for error in (
        _stream_error(
            lambda: stub.OpenSession(infer_pb2.OpenSessionRequest(picture=picture), metadata=APP, timeout=60)
        ),
        _stream_error(
            lambda: stub.SegmentOnce(
                infer_pb2.SegmentOnceRequest(picture=picture, prompt=prompt), metadata=APP, timeout=60
            )
        ),
    ):
        assert (error.code, error.reason) == (code, reason) and words in error.message, error
        assert [f for f, _ in error.violations] == ["picture.data"]
    _still_serving(opened.session)


def test_segment_once_checks_the_prompt_against_the_picture(
    opened: Opened, stub: infer_pb2_grpc.InferServiceStub
) -> None:
    picture = common_pb2.Picture(data=png(Image.new("RGB", (40, 30))))
    for prompt, field, words in (
        (infer_pb2.Prompt(points=[_point(41, 5)]), "prompt.points[0]", "(41, 5) is outside the 40x30 picture"),
        (infer_pb2.Prompt(box=infer_pb2.Box(x0=1, y0=1, x1=20, y1=31)), "prompt.box", "outside the 40x30 picture"),
    ):
        request = infer_pb2.SegmentOnceRequest(picture=picture, prompt=prompt)
        error = _stream_error(lambda r=request: stub.SegmentOnce(r, metadata=APP, timeout=60))  # type: ignore[misc]
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_PROMPT"), error
        assert [f for f, _ in error.violations] == [field] and words in error.message, error
    _still_serving(opened.session)


def test_routes_that_cannot_answer(ai: AiClient, opened: Opened, photos: dict[str, Path]) -> None:
    with pytest.raises(CraftAiError) as caught:
        ai.open_session(photos["chelsea.png"], recipe=catalogues.UNCONFIRMED)
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION and caught.value.reason == "RECIPE_UNAVAILABLE"
    with pytest.raises(CraftAiError) as caught:
        ai.open_session(photos["chelsea.png"], recipe="u2netp")
    assert caught.value.code == grpc.StatusCode.NOT_FOUND and caught.value.reason == "UNKNOWN_RECIPE"
    _still_serving(opened.session)


# ------------------------------------------------------------------------------------------------
# the craftai command


def _craftai(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAFTAI_ADDRESS": address}
    return subprocess.run(
        [str(servers.BIN / "craftai"), *args], check=False, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_segment_command(server: servers.Process, opened: Opened, photos: dict[str, Path], tmp_path: Path) -> None:
    photo = tmp_path / "photo.jpg"
    Image.open(photos["chelsea.png"]).convert("RGB").save(photo, quality=95)
    out = tmp_path / "out" / "mask.png"
    run = _craftai(server.address, "segment", str(photo), "--point", "310,200", "--point", "40,40:bg", "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert f"{out}: predicted IoU " in run.stdout and "% of the picture" in run.stdout
    # the default recipe since issue 15
    assert "photo.jpg: 451x300 sam2.1-hiera-tiny/onnxruntime on cpu: " in run.stdout and " ms round trip" in run.stdout
    assert "server " in run.stdout and "encode " in run.stdout
    assert mask_of(out.read_bytes()).shape == (HEIGHT, WIDTH)

    run = _craftai(
        server.address,
        "segment",
        str(photo),
        "--box",
        "120,40,380,290",
        "--point",
        "250,150",
        "--all-masks",
        "-o",
        str(tmp_path / "all.png"),
    )
    assert run.returncode == 0, run.stderr
    written = sorted(p.name for p in tmp_path.glob("all-*.png"))
    assert written == ["all-0.png", "all-1.png", "all-2.png"]
    scores = [float(line.split("predicted IoU ")[1].split(",")[0]) for line in run.stdout.splitlines()[:3]]
    assert scores == sorted(scores, reverse=True)

    run = _craftai(server.address, "segment", str(photo), "--box", "100,100,50,150", "-o", str(tmp_path / "x.png"))
    assert run.returncode == 1 and "craftai: the box (100, 100, 50, 150) has inverted corners" in run.stderr
    run = _craftai(server.address, "segment", str(photo), "-o", str(tmp_path / "x.png"))
    assert run.returncode == 2 and "give at least one --point or a --box" in run.stderr
    run = _craftai(server.address, "segment", str(photo), "--point", "1,2:maybe", "-o", str(tmp_path / "x.png"))
    assert run.returncode == 2 and "a point is x,y or x,y:fg or x,y:bg" in run.stderr
