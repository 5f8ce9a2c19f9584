"""The torch route of SAM 2 tiny through the services: prepared once from the ONNX pair (self-
verified), then it answers what the onnxruntime route answers on the same pictures and prompts:
IoU >= 0.999 per mask and predicted IoUs within 1e-4."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, SetupOutput
from craftai_dev import segment, servers
from craftai_dev.files import sample_photo
from craftai_dev.masks import iou as _iou
from craftai_wire.v1 import common_pb2

pytestmark = pytest.mark.slow
PROMPTS = [
    {"points": [(220, 150, True)]},
    {"points": [(220, 150, True), (40, 30, False)]},
    {"box": (100, 60, 380, 260)},
    {"points": [(250, 170, True)], "box": (100, 60, 380, 260)},
]


@pytest.fixture(scope="module")
def torch_server(sam_store: segment.SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    root = tmp_path_factory.mktemp("sam-torch")
    shutil.copytree(sam_store.store, root / "store")
    process = segment.SetUpStore(root / "store", sam_store.recipes).serve(root)
    with servers.running(process):
        yield process


def test_setup_prepares_once(torch_server: servers.Process) -> None:
    with AiClient(app_id="tests", target=torch_server.address) as ai:
        first = list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))
        result = first[-1]
        assert isinstance(result, SetupOutput) and result.prepared_now
        assert result.revision.startswith("sam21-torch.1-")
        assert any(isinstance(e, common_pb2.Progress) and e.stage == "convert" for e in first)
        again = list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))[-1]
        assert isinstance(again, SetupOutput) and again.already_done and not again.prepared_now


def test_torch_route_equals_the_onnxruntime_route(torch_server: servers.Process) -> None:
    picture = segment.png(Image.open(sample_photo("chelsea.png")).convert("RGB"))
    with AiClient(app_id="tests", target=torch_server.address) as ai:
        list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))
        ours = ai.open_session(picture, "sam2-hiera-tiny", "torch")
        theirs = ai.open_session(picture, "sam2-hiera-tiny", "onnxruntime")
        assert (ours.engine, theirs.engine) == ("torch", "onnxruntime")
        previous = None
        for prompt in PROMPTS:
            a = ours.segment(**prompt, all_masks=True, low_res=True)  # type: ignore[arg-type]
            b = theirs.segment(**prompt, all_masks=True, low_res=True)  # type: ignore[arg-type]
            assert len(a.masks) == len(b.masks) == 3
            for x, y in zip(a.masks, b.masks, strict=True):
                assert abs(x.predicted_iou - y.predicted_iou) <= 1e-4, prompt
                assert _iou(segment.mask_of(x.png) > 0, segment.mask_of(y.png) > 0) >= 0.999, prompt
            previous = b.best.low_res
        a = ours.segment([(220, 150, True)], mask_input=previous)
        b = theirs.segment([(220, 150, True)], mask_input=previous)
        assert _iou(segment.mask_of(a.best.png) > 0, segment.mask_of(b.best.png) > 0) >= 0.999
        assert abs(a.best.predicted_iou - b.best.predicted_iou) <= 1e-4


def _refused(call: Callable[[], object]) -> CraftAiError:
    with pytest.raises(CraftAiError) as caught:
        call()
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_PROMPT"), error
    assert [field for field, _ in error.violations] == ["prompt.single_mask_like_meta"], error
    return error


def test_single_mask_like_meta_on_both_routes(torch_server: servers.Process, tmp_path: Path) -> None:
    """The field goes through the SDK to either route, which answers Meta's one mask (on astronaut,
    this fixture's single-mask token is stable: the answer is none of the three multimask ones; its
    parity with Meta's predictor is tests/parity/test_sam_single_mask.py): the torch route from its
    network, the onnxruntime route from its prepared decoder, the same mask; asked with all_masks it
    is refused."""
    photo = sample_photo("astronaut.png")
    picture = segment.png(Image.open(photo).convert("RGB"))
    click = [(280.0, 230.0, True)]
    with AiClient(app_id="tests", target=torch_server.address) as ai:
        list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))
        ours = ai.open_session(picture, "sam2-hiera-tiny", "torch")
        like_meta = ours.segment(click, single_mask_like_meta=True, low_res=True)
        three = ours.segment(click, all_masks=True)
        assert len(like_meta.masks) == 1 and len(three.masks) == 3
        single = segment.mask_of(like_meta.best.png) > 0
        assert all(_iou(single, segment.mask_of(m.png) > 0) < 0.9 for m in three.masks)
        assert len(like_meta.best.low_res.logits) == 256 * 256 * 4  # fed back like any answer
        error = _refused(lambda: ours.segment(click, all_masks=True, single_mask_like_meta=True))
        assert "ask for one of the two" in error.message
        on_onnx = ai.segment_once(
            picture, click, single_mask_like_meta=True, recipe="sam2-hiera-tiny", engine="onnxruntime"
        )
        assert on_onnx.engine == "onnxruntime" and len(on_onnx.masks) == 1
        assert _iou(segment.mask_of(on_onnx.best.png) > 0, single) >= 0.999
        assert abs(on_onnx.best.predicted_iou - like_meta.best.predicted_iou) <= 1e-4
    env = {**os.environ, "CRAFTAI_ADDRESS": torch_server.address}
    run = subprocess.run(
        [
            str(servers.BIN / "craftai"),
            "segment",
            str(photo),
            "--point",
            "280,230",
            "--like-meta",
            "--recipe",
            "sam2-hiera-tiny",
            "-o",
            str(tmp_path / "m.png"),
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr  # the default engine on a CPU: onnxruntime
    assert _iou(segment.mask_of((tmp_path / "m.png").read_bytes()) > 0, single) >= 0.999
