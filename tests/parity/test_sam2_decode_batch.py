"""Decoder calls from different sessions batch: one call for prompts on several pictures answers
what each prompt gets alone."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_infer.routes.sam2_torch import SamTorchRunner
from craftai_models.sam2.model import build_sam21_tiny
from craftai_prepare.converters import sam21
from tests.support import sam_fixture
from tests.support.files import sample_photo


@pytest.mark.slow
def test_decode_batch_equals_one_by_one(sam21_files: sam_fixture.Sam21Fixture) -> None:
    state = sam21.convert(sam21.load_onnx(sam21_files.encoder), sam21.load_onnx(sam21_files.decoder))
    runner = SamTorchRunner(build_sam21_tiny(state).eval(), "cpu")
    a = np.asarray(Image.open(sample_photo("chelsea.png")).convert("RGB"))
    b = np.asarray(Image.open(sample_photo("coffee.png")).convert("RGB"))
    ea, eb = runner.encode_batch([a, b])
    items = [
        (ea, SamPrompt(points=[(220, 150)], labels=[1]), False),
        (eb, SamPrompt(points=[(300, 200)], labels=[1]), True),
    ]
    together = runner.decode_batch(items)
    for (embedding, prompt, all_masks), batched in zip(items, together, strict=True):
        alone = runner.decode(embedding, prompt, all_masks=all_masks)
        assert batched.masks.shape == alone.masks.shape
        np.testing.assert_allclose(batched.ious, alone.ious, atol=1e-5)
        mismatch = np.logical_xor(batched.masks, alone.masks).mean()
        assert mismatch < 1e-4
