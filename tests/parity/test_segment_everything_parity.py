"""Segment everything through the service against Meta's SAM2AutomaticMaskGenerator on the same
random weights and picture, with the same parameters: every one of Meta's masks has a match
(mask IoU >= 0.9) among ours for at least 95% of them, and the counts agree within 5%.

Meta's generator runs as published but for what cannot run beside this machine's CPU torch:
torchvision's NMS and Meta's CUDA connected-components kernel, stood in for by the obviously
correct versions of craftai_dev.amg_reference. Its `set_image` (Meta's encoder, about 10 s
on this machine) runs once; the generator's later calls reuse those features (its `set_image` and
`reset_predictor` made no-ops), which changes nothing else it computes.

The random-weight decoder's masks are specks over the whole picture with predicted IoUs under
0.6, so Meta's defaults keep no mask at all (checked: both answer none); the parameters compared
are chosen so that many masks survive the filters ("filters": NMS at 1 drops none) and so that
NMS and the clean-up have work to do ("nms-and-clean-up"). Small grids (16 points): Meta's
batched decoder costs seconds per point on this CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, EverythingOutput
from craftai_dev import amg_reference, servers
from craftai_dev.masks import iou_matrix
from craftai_dev.segment import SetUpStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
]
PHOTO = "astronaut.png"
MIN_MATCH_IOU = 0.9
MIN_MATCHED = 0.95
MAX_COUNT_DIFF = 0.05
CASES: dict[str, dict[str, Any]] = {
    "meta-defaults": {"points_per_side": 4},
    "filters": {"points_per_side": 4, "pred_iou_thresh": 0.3, "stability_score_thresh": 0.5, "box_nms_thresh": 1.0},
    "nms-and-clean-up": {
        "points_per_side": 4,
        "pred_iou_thresh": 0.3,
        "stability_score_thresh": 0.0,
        "box_nms_thresh": 0.7,
        "min_mask_region_area": 300,
    },
}
# multimask_output=False: Meta's single mask per point (token 0 unless unstable), on both routes (the
# onnxruntime route's prepared decoder answers token 0 too)
SINGLE_MASK: dict[str, Any] = {
    "points_per_side": 4,
    "pred_iou_thresh": 0.0,
    "stability_score_thresh": 0.0,
    "box_nms_thresh": 1.0,
    "multimask_output": False,
}


@pytest.fixture(scope="module")
def picture(photos: dict[str, Path]) -> npt.NDArray[np.uint8]:
    return np.asarray(Image.open(photos[PHOTO]).convert("RGB"))


@pytest.fixture(scope="module")
def client(sam_torch_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AiClient]:
    """A server on the store with both routes prepared (the torch route's conversion made once a run)."""
    with (
        servers.running(sam_torch_store.serve(tmp_path_factory.mktemp("everything-parity"))) as process,
        AiClient(app_id="parity", target=process.address) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def ours(client: AiClient, photos: dict[str, Path]) -> Iterator[Any]:
    with client.open_session(photos[PHOTO]) as session:
        yield session


@pytest.fixture(scope="module")
def ours_torch(client: AiClient, photos: dict[str, Path]) -> Iterator[Any]:
    """A session of the same picture on the torch route (its setup only checks the prepared files)."""
    list(client.setup("image.segment", engine="torch"))
    with client.open_session(photos[PHOTO], engine="torch") as session:
        yield session


@pytest.fixture(scope="module")
def meta(sam21_reference_model: Any, picture: npt.NDArray[np.uint8], meta_predictor: Callable[[Any], Any]) -> Any:
    """A function of the parameters: Meta's generator's masks on the picture (the features of Meta's
    `set_image`, once a run: shared with the parity suites that prompt the same photo; each set of
    parameters generated once, for both routes' tests)."""
    predictor = meta_predictor(picture)
    answered: dict[tuple[tuple[str, Any], ...], list[dict[str, Any]]] = {}

    def run(**parameters: Any) -> list[dict[str, Any]]:
        key = tuple(sorted(parameters.items()))
        if key not in answered:
            g = amg_reference.generator(sam21_reference_model, **parameters)
            for name in ("_features", "_orig_hw", "_is_image_set", "_is_batch"):
                setattr(g.predictor, name, getattr(predictor, name))
            g.predictor.set_image = lambda image: None
            g.predictor.reset_predictor = lambda: None
            answered[key] = list(g.generate(picture))
        return answered[key]

    return run


def _meta_mask(record: dict[str, Any]) -> npt.NDArray[np.bool_]:
    amg_reference.install_standins()
    from sam2.utils.amg import rle_to_mask

    return np.asarray(rle_to_mask(record["segmentation"]), dtype=bool)


def _compare(found: EverythingOutput, theirs: list[dict[str, Any]]) -> tuple[int, float, float]:
    """(how many of Meta's masks have a match, the smallest matched mask IoU, the largest
    difference of predicted IoU between a mask of Meta's and the closest in score of its matches:
    masks from neighbouring points can be alike); asserts the counts."""
    mine = [m.array() for m in found.masks]
    assert abs(len(mine) - len(theirs)) <= MAX_COUNT_DIFF * max(len(theirs), 1), (len(mine), len(theirs))
    matched, worst, score_diff = 0, 1.0, 0.0
    for record, overlaps in zip(theirs, iou_matrix([_meta_mask(r) for r in theirs], mine), strict=True):
        matches = [k for k, overlap in enumerate(overlaps) if overlap >= MIN_MATCH_IOU]
        if matches:
            matched += 1
            worst = min(worst, max(overlaps[k] for k in matches))
            closest = min(abs(found.masks[k].predicted_iou - record["predicted_iou"]) for k in matches)
            score_diff = max(score_diff, closest)
    return matched, worst, score_diff


@pytest.mark.parametrize("engine", ["onnxruntime", "torch"])
@pytest.mark.parametrize("case", list(CASES))
def test_segment_everything_finds_the_masks_meta_finds(case: str, engine: str, request: Any, meta: Any) -> None:
    """Both routes; the torch route's multimask grid runs in two steps (the masks' upscaling only
    for the points with a mask above pred_iou_thresh: routes/sam2_torch.py)."""
    parameters = CASES[case]
    session = request.getfixturevalue("ours" if engine == "onnxruntime" else "ours_torch")
    found = session.segment_everything(**parameters)
    assert found.engine == engine
    theirs = meta(**parameters)
    if case == "meta-defaults":
        assert found.masks == [] and theirs == []
        return
    assert len(theirs) > 1, "the parameters must leave Meta's generator masks to compare"
    matched, worst, score_diff = _compare(found, theirs)
    assert matched >= MIN_MATCHED * len(theirs), (case, matched, len(theirs), worst)
    assert score_diff <= 1e-3, score_diff  # the tolerance of tests/parity/test_sam_onnx_parity.py
    if case == "nms-and-clean-up":
        assert len(theirs) < found.candidates  # NMS removed some on both sides


def test_reference_stand_ins_are_in_use(meta: Any) -> None:
    """Meta's clean-up ran (its CUDA kernel stood in for), rather than being skipped with a warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert meta(points_per_side=1, pred_iou_thresh=0.0, stability_score_thresh=0.0, min_mask_region_area=50)


@pytest.mark.parametrize("engine", ["onnxruntime", "torch"])
def test_one_mask_per_point_is_meta_s_single_mask(engine: str, request: Any, meta: Any) -> None:
    """multimask_output=False on both routes: each point's mask is Meta's single-mask answer."""
    session = request.getfixturevalue("ours" if engine == "onnxruntime" else "ours_torch")
    found = session.segment_everything(**SINGLE_MASK)
    theirs = meta(**SINGLE_MASK)
    assert found.engine == engine and found.candidates <= 16 and len(theirs) > 1, (found.candidates, len(theirs))
    matched, worst, score_diff = _compare(found, theirs)
    assert matched == len(theirs), (matched, len(theirs), worst)
    assert score_diff <= 1e-3, score_diff
