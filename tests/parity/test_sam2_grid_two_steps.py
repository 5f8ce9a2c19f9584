"""The torch route's multimask grid in two steps (the transformer and the IoU head for every point,
the masks' upscaling only for the points with a mask above pred_iou_thresh) finds exactly what the
decoder in one step finds: the same masks, boxes, scores and points, in Meta's order, whether a
batch is decoded in one call or in calls of a few points."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev.files import sample_photo
from craftai_infer.pipelines import mask_generator
from craftai_infer.pipelines.mask_generator import Candidates, Everything, torch_steps
from craftai_infer.pipelines.segment_sam import grid_point_feeds
from craftai_infer.pipelines.segment_sam_torch import TorchSamEmbedding
from craftai_infer.routes.sam2_torch import SamTorchRunner
from craftai_models.sam2.contract import LOW_RES

pytestmark = pytest.mark.slow
SIDE = 5  # 25 points


def decoded(runner: SamTorchRunner, e: TorchSamEmbedding, points: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Every point's three masks and IoUs from the decoder in one step (`decode`)."""
    coords, labels = grid_point_feeds(points, e.picture_height, e.picture_width)
    n = len(points)
    with torch.inference_mode():
        return runner.net.decode(
            e.image_embed,
            e.high_res_feats_0,
            e.high_res_feats_1,
            torch.from_numpy(coords),
            torch.from_numpy(labels),
            torch.zeros((n, 1, LOW_RES, LOW_RES)),
            torch.zeros(n),
        )


def one_step(runner: SamTorchRunner, e: TorchSamEmbedding, points: np.ndarray, settings: Everything) -> Candidates:
    """The reference: every point's three masks made, then the filters."""
    masks, ious = decoded(runner, e, points)
    return torch_steps.batch_candidates(masks, ious, points, e.picture_height, e.picture_width, settings=settings)


@pytest.fixture(scope="module")
def grid_case(
    sam21_torch_runner: SamTorchRunner, torch_encoded: Callable[[Any], TorchSamEmbedding]
) -> tuple[TorchSamEmbedding, np.ndarray, Everything]:
    """chelsea.png, a 5x5 grid, and a pred_iou_thresh at which some points have a mask above it
    and some none (so that the second step runs on a gathered part of the batch)."""
    picture = np.asarray(Image.open(sample_photo("chelsea.png")).convert("RGB"))
    e = torch_encoded(picture)
    points = mask_generator.grid_points(SIDE, e.picture_height, e.picture_width)
    best = decoded(sam21_torch_runner, e, points)[1].numpy().max(axis=1)
    ranked = np.sort(best)
    middle = len(ranked) // 2  # about half the points have a mask above it, none of them near it
    threshold = float((ranked[middle - 1] + ranked[middle]) / 2)
    assert 0 < (best > threshold).sum() < len(points)
    return e, points, Everything(pred_iou_thresh=threshold, stability_score_thresh=0.3)


@pytest.mark.parametrize("grid_call", [None, 4], ids=["one call", "calls of 4 points"])
def test_two_steps_find_what_one_step_finds(
    sam21_converted: dict[str, torch.Tensor],
    grid_case: tuple[TorchSamEmbedding, np.ndarray, Everything],
    grid_call: int | None,
) -> None:
    from craftai_models.sam2.model import build_sam21_tiny

    e, points, settings = grid_case
    runner = SamTorchRunner(build_sam21_tiny(sam21_converted), "cpu", grid_call=grid_call)
    ours = runner.grid(e, points, settings)
    theirs = one_step(runner, e, points, settings)
    made = {tuple(p) for p in ours.points.tolist()}
    assert len(theirs) >= 3 and len(made) < len(points), (len(theirs), len(made))
    assert [c.tolist() for c in ours.counts] == [c.tolist() for c in theirs.counts]
    np.testing.assert_array_equal(ours.boxes, theirs.boxes)
    np.testing.assert_array_equal(ours.points, theirs.points)
    # a batch of another size may round the transformer's sums otherwise (calls of 4: 6e-8)
    np.testing.assert_allclose(ours.ious, theirs.ious, rtol=1e-6)
    # the stability score is a ratio of pixel counts at the threshold +- the offset: a logit rounded to
    # the other side of one of them moves a pixel (one of ~10^5 is ~1e-5; seen with one CPU thread)
    np.testing.assert_allclose(ours.stability, theirs.stability, rtol=1e-4)


def test_nothing_above_the_threshold_makes_no_mask(
    sam21_torch_runner: SamTorchRunner, grid_case: tuple[TorchSamEmbedding, np.ndarray, Everything]
) -> None:
    e, points, _ = grid_case
    assert len(sam21_torch_runner.grid(e, points, Everything(pred_iou_thresh=0.999))) == 0


def test_several_batches_of_two_pictures_in_one_call(
    sam21_torch_runner: SamTorchRunner,
    torch_encoded: Callable[[Any], TorchSamEmbedding],
    grid_case: tuple[TorchSamEmbedding, np.ndarray, Everything],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the route does with the batches that waited for it: batches of two pictures, their
    `attend` calls read back two at a time (GRID_WINDOW 2), the kept points of each picture
    upscaled together; each batch answers what it answers alone."""
    from craftai_infer.pipelines.mask_generator import torch_batches

    monkeypatch.setattr(torch_batches, "GRID_WINDOW", 2)
    e, points, settings = grid_case
    other = torch_encoded(np.asarray(Image.open(sample_photo("astronaut.png")).convert("RGB")))
    other_points = mask_generator.grid_points(SIDE, other.picture_height, other.picture_width)
    batches = [
        (picture, chunk, settings)
        for picture, grid in ((e, points), (other, other_points))
        for chunk in mask_generator.batches(grid, 7)
    ]
    together = sam21_torch_runner.grid_batches(batches)
    assert len(together) == len(batches) == 8
    assert sum(len(c) for c in together) >= 3
    for found, (picture, chunk, _) in zip(together, batches, strict=True):
        alone = one_step(sam21_torch_runner, picture, chunk, settings)
        assert [c.tolist() for c in found.counts] == [c.tolist() for c in alone.counts]
        np.testing.assert_array_equal(found.points, alone.points)
        np.testing.assert_allclose(found.ious, alone.ious, rtol=1e-6)
