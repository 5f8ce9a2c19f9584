"""The torch route of SAM 2 tiny through the services: prepared once from the ONNX pair (self-
verified), then it answers what the onnxruntime route answers on the same pictures and prompts:
IoU >= 0.999 per mask and predicted IoUs within 1e-4."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient
from craftai_wire.v1 import common_pb2, prepare_pb2
from tests.support import segment, servers
from tests.support.files import sample_photo

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
        assert isinstance(result, prepare_pb2.SetupResult) and result.prepared_now
        assert result.revision.startswith("sam21-torch.1-")
        assert any(isinstance(e, common_pb2.Progress) and e.stage == "convert" for e in first)
        again = list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))[-1]
        assert isinstance(again, prepare_pb2.SetupResult) and again.already_done and not again.prepared_now


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def test_torch_route_equals_the_onnxruntime_route(torch_server: servers.Process) -> None:
    picture = segment.png(Image.open(sample_photo("chelsea.png")).convert("RGB"))
    with AiClient(app_id="tests", target=torch_server.address) as ai:
        list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))
        ours = ai.open_session(picture, "sam2-hiera-tiny", "torch")
        theirs = ai.open_session(picture, "sam2-hiera-tiny", "onnxruntime")
        assert (ours.engine, theirs.engine) == ("torch", "onnxruntime")
        previous = None
        for prompt in PROMPTS:
            a = ours.segment(**prompt, all_masks=True)  # type: ignore[arg-type]
            b = theirs.segment(**prompt, all_masks=True)  # type: ignore[arg-type]
            assert len(a.masks) == len(b.masks) == 3
            for x, y in zip(a.masks, b.masks, strict=True):
                assert abs(x.predicted_iou - y.predicted_iou) <= 1e-4, prompt
                assert _iou(segment.mask_of(x.png) > 0, segment.mask_of(y.png) > 0) >= 0.999, prompt
            previous = b.best.low_res
        a = ours.segment([(220, 150, True)], mask_input=previous)
        b = theirs.segment([(220, 150, True)], mask_input=previous)
        assert _iou(segment.mask_of(a.best.png) > 0, segment.mask_of(b.best.png) > 0) >= 0.999
        assert abs(a.best.predicted_iou - b.best.predicted_iou) <= 1e-4
