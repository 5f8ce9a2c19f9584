"""The torch route's runner (converted weights, pre/post on the device) answers what the
onnxruntime route answers on the same picture and prompts: IoU >= 0.999 per mask, IoUs within 1e-4."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from PIL import Image

from craftai_dev import sam_fixture
from craftai_dev.files import sample_photo
from craftai_dev.masks import iou as _iou
from craftai_dev.segment import Embeddings
from craftai_infer.pipelines import mask_formats
from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_infer.pipelines.segment_sam_torch import TorchSamEmbedding
from craftai_infer.routes.sam2_onnx import SamOnnxRunner
from craftai_infer.routes.sam2_torch import SamTorchRunner

PROMPTS = {
    "click": SamPrompt(points=[(220, 150)], labels=[1]),
    "clicks": SamPrompt(points=[(220, 150), (40, 30)], labels=[1, 0]),
    "box": SamPrompt(box=(100, 60, 380, 260)),
    "box+click": SamPrompt(points=[(250, 170)], labels=[1], box=(100, 60, 380, 260)),
}


@pytest.fixture(scope="module")
def runners(
    sam21_files: sam_fixture.Sam21Fixture, sam21_torch_runner: SamTorchRunner
) -> tuple[SamOnnxRunner, SamTorchRunner]:
    return SamOnnxRunner(sam21_files.encoder, sam21_files.decoder, use_gpu=False), sam21_torch_runner


@pytest.mark.slow
def test_torch_runner_equals_the_onnxruntime_route(
    runners: tuple[SamOnnxRunner, SamTorchRunner],
    torch_encoded: Callable[[Any], TorchSamEmbedding],
    sam21_files: sam_fixture.Sam21Fixture,
    sam_onnx_embeddings: Embeddings,
) -> None:
    onnx_runner, torch_runner = runners
    picture = np.asarray(Image.open(sample_photo("chelsea.png")).convert("RGB"))
    ours_embedding = torch_encoded(picture)  # shared with test_sam_single_mask (the same photo)
    theirs_embedding = sam_onnx_embeddings.encoded(onnx_runner, sam21_files.encoder, picture)  # made once a run
    assert ours_embedding.nbytes == theirs_embedding.nbytes
    previous = None
    for name, prompt in PROMPTS.items():
        ours = torch_runner.decode(ours_embedding, prompt, all_masks=True)
        theirs = onnx_runner.decode(theirs_embedding, prompt, all_masks=True)
        assert ours.masks.shape == theirs.masks.shape == (3, 300, 451), name
        np.testing.assert_allclose(ours.ious, theirs.ious, atol=1e-4, err_msg=name)
        for k in range(3):
            assert _iou(ours.masks[k], theirs.masks[k]) >= 0.999, (name, k)
        for answer in (ours, theirs):  # each route's areas and boxes are its masks' own
            assert answer.areas.tolist() == [int(np.count_nonzero(m)) for m in answer.masks], name
            assert [tuple(b) for b in answer.boxes.tolist()] == [mask_formats.box(m) for m in answer.masks], name
        previous = theirs.low_res[0]
    feedback = SamPrompt(points=[(220, 150)], labels=[1], mask_input=previous)
    ours = torch_runner.decode(ours_embedding, feedback)
    theirs = onnx_runner.decode(theirs_embedding, feedback)
    assert _iou(ours.masks[0], theirs.masks[0]) >= 0.999
    np.testing.assert_allclose(ours.ious, theirs.ious, atol=1e-4)
