"""image.segment through the service (protobuf prompt, session, PNG answer) against Meta's
SAM2ImagePredictor on the same random weights: the whole path from the wire's coordinates and
labels to the mask PNG means what the reference means.

The reference is given the prompt exactly as an app describes it (picture pixels, labels 1/0, the
box as x0, y0, x1, y1) and the service the same through the SDK; every one of the three masks must
match with IoU >= 0.99 and every predicted IoU within 1e-3 (the tolerances of test_sam_onnx_parity).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, Point, SegmentOutput
from craftai_dev import servers
from craftai_dev.masks import iou as _iou
from craftai_dev.segment import SetUpStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
]
MIN_MASK_IOU = 0.99
MAX_SCORE_DIFF = 1e-3


@pytest.fixture(scope="module")
def ai(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AiClient]:
    with (
        servers.running(sam_store.serve(tmp_path_factory.mktemp("parity-server"))) as process,
        AiClient(app_id="parity", target=process.address) as client,
    ):
        yield client


def _compare(answer: SegmentOutput, reference: tuple[Any, Any, Any]) -> npt.NDArray[np.float32]:
    """Asserts parity of the three masks (best first on both sides); returns the reference's best low-res."""
    masks, ious, low_res = reference
    order = np.argsort(-ious, kind="stable")
    assert len(answer.masks) == 3
    for mask, k in zip(answer.masks, order, strict=True):
        pixels = np.asarray(Image.open(io.BytesIO(mask.png))) > 0
        assert _iou(pixels, masks[k] > 0) >= MIN_MASK_IOU
        assert abs(mask.predicted_iou - float(ious[k])) <= MAX_SCORE_DIFF
    return np.asarray(low_res[order[0]], dtype=np.float32)


def test_prompts_through_the_service_mean_what_they_mean_to_meta(
    ai: AiClient, meta_predictor: Callable[[Any], Any], photos: dict[str, Path]
) -> None:
    path = photos["coffee.png"]
    picture = np.asarray(Image.open(path).convert("RGB"))
    height, width = picture.shape[:2]
    predictor = meta_predictor(picture)  # Meta's set_image of the photo, once a run (test_sam_single_mask's too)

    def reference(points: list[Point], box: tuple[float, ...] | None, mask: Any = None) -> tuple[Any, Any, Any]:
        return tuple(
            predictor.predict(
                point_coords=np.array([(p.x, p.y) for p in points], np.float32) if points else None,
                point_labels=np.array([int(p.foreground) for p in points], np.int32) if points else None,
                box=None if box is None else np.array(box, np.float32),
                mask_input=None if mask is None else mask[None],
                multimask_output=True,
                return_logits=True,
            )
        )

    clicks = [Point(0.7 * width, 0.4 * height), Point(0.2 * width, 0.9 * height, foreground=False)]
    box = (0.1 * width, 0.2 * height, 0.85 * width, 0.95 * height)
    with ai.open_session(path) as session:
        assert (session.width, session.height) == (width, height)
        _compare(session.segment(points=clicks[:1], all_masks=True), reference(clicks[:1], None))
        _compare(session.segment(box=box, all_masks=True), reference([], box))
        answer = session.segment(points=clicks, box=box, all_masks=True, low_res=True)
        best_low_res = _compare(answer, reference(clicks, box))
        # Feedback: the service gets its own previous answer, the reference its own (equal within tolerance).
        more = [*clicks, Point(0.5 * width, 0.5 * height)]
        fed = session.segment(points=more, mask_input=answer.best.low_res, all_masks=True, low_res=True)
        _compare(fed, reference(more, None, best_low_res))
