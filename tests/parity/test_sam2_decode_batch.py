"""Decoder calls from different sessions batch: one call for prompts on several pictures answers
what each prompt gets alone (prompts asking for Meta's single mask among them: one more call)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev.files import sample_photo
from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_infer.routes.sam2_torch import SamTorchRunner
from craftai_models.sam2.model import build_sam21_tiny


@pytest.mark.slow
def test_decode_batch_equals_one_by_one(sam21_converted: dict[str, torch.Tensor]) -> None:
    runner = SamTorchRunner(build_sam21_tiny(sam21_converted).eval(), "cpu")
    a = np.asarray(Image.open(sample_photo("chelsea.png")).convert("RGB"))
    b = np.asarray(Image.open(sample_photo("coffee.png")).convert("RGB"))
    ea, eb = runner.encode_batch([a, b])
    items = [
        (ea, SamPrompt(points=[(220, 150)], labels=[1]), False),
        (eb, SamPrompt(points=[(300, 200)], labels=[1]), True),
        # Meta's single mask, mixed in: answered by a second call, in place
        (ea, SamPrompt(points=[(120, 90)], labels=[1], single_mask_like_meta=True), False),
        (eb, SamPrompt(points=[(60, 40)], labels=[1]), False),
        (eb, SamPrompt(points=[(310, 210)], labels=[1], single_mask_like_meta=True), False),
    ]
    together = runner.decode_batch(items)
    assert [len(t.masks) for t in together] == [1, 3, 1, 1, 1]
    for (embedding, prompt, all_masks), batched in zip(items, together, strict=True):
        alone = runner.decode(embedding, prompt, all_masks=all_masks)
        assert batched.masks.shape == alone.masks.shape
        np.testing.assert_allclose(batched.ious, alone.ious, atol=1e-5)
        mismatch = np.logical_xor(batched.masks, alone.masks).mean()
        assert mismatch < 1e-4
