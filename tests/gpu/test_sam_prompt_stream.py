"""SAM's prompts on their own high-priority CUDA stream (routes/sam2_torch.py, INTERACTIVE_STREAM):
a click does not wait for bulk work queued on the default stream, yet reads its embedding only once
the encoder has made it, and answers what it answers with everything finished first.

Order, not time: ~0.5 s of matrix products is queued on the default stream before the click, and
the click must come back while they are still running (their event not yet reached). GPU only: run
on the lent GPU machine with `bash tools/gpu/run_tests.sh tests/gpu/test_sam_prompt_stream.py`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev.sam_fixture import Sam21Fixture

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _queue_bulk_work(side: int = 8192, products: int = 25) -> torch.cuda.Event:
    """About half a second of matrix products on the default stream; the event after them."""
    a = torch.randn(side, side, device="cuda") / side**0.5
    for _ in range(products):
        a = a @ a
    done = torch.cuda.Event()  # type: ignore[no-untyped-call]
    done.record()
    return done


def test_a_click_passes_bulk_work_on_the_default_stream_and_waits_for_its_embedding(
    sam21_files: Sam21Fixture, photos: dict[str, Path]
) -> None:
    from craftai_infer.pipelines.segment_sam import SamPrompt
    from craftai_infer.routes import sam2_torch
    from craftai_models.sam2.model import build_sam21_tiny
    from craftai_prepare.converters import sam21

    assert sam2_torch.INTERACTIVE_STREAM
    state = sam21.convert(sam21.load_onnx(sam21_files.encoder), sam21.load_onnx(sam21_files.decoder))
    runner = sam2_torch.SamTorchRunner(build_sam21_tiny(state).to("cuda"), "cuda")
    runner.warm_up()
    pictures = [np.asarray(Image.open(photos[n]).convert("RGB")) for n in ("astronaut.png", "chelsea.png")]
    prompts = [SamPrompt([(0.55 * p.shape[1], 0.45 * p.shape[0])], [1]) for p in pictures]
    with torch.inference_mode():
        first = runner.encode(pictures[0])
        torch.cuda.synchronize()
        expected = runner.decode(first, prompts[0])

        bulk = _queue_bulk_work()
        passed = runner.decode(first, prompts[0])
        still_running = not bulk.query()  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()
        assert still_running, "the click waited for the bulk work on the default stream"
        assert np.array_equal(passed.masks, expected.masks) and np.array_equal(passed.ious, expected.ious)

        # an encoder batch queued behind bulk work, then a click on it at once: it waits for that
        # embedding (its event), not for everything
        _queue_bulk_work()
        second = runner.encode(pictures[1])
        assert second.ready is not None
        at_once = runner.decode(second, prompts[1])
        torch.cuda.synchronize()
        settled = runner.decode(second, prompts[1])
    assert np.array_equal(at_once.masks, settled.masks) and np.array_equal(at_once.ious, settled.ious)
    assert 0 < int(settled.areas[0]) < pictures[1].shape[0] * pictures[1].shape[1]
