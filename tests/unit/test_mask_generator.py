"""Meta's mask clean-up and the automatic mask generator's steps, piece by piece, against Meta's
own functions (the `sam2` reference; torchvision's NMS and Meta's CUDA connected-components kernel
stood in for by craftai_dev.amg_reference), and the torch route's steps against the numpy
route's, on synthetic low-res logits (no network: cheap)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage  # type: ignore[import-untyped]

from craftai_dev import amg_reference
from craftai_infer.pipelines import mask_generator, segment_sam_torch
from craftai_infer.pipelines.mask_cleanup import Cleanup, clean_logits, small_regions
from craftai_infer.pipelines.mask_formats import rle_counts
from craftai_infer.pipelines.mask_generator import amg, torch_steps
from craftai_infer.pipelines.segment_sam import upscale_logits

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
HEIGHT, WIDTH = 75, 113


def _logits(count: int, seed: int = 3) -> np.ndarray:
    """Smooth random logits [count, 256, 256] with blobs, holes and specks of many sizes, steeper
    from one map to the next (stability scores from about 0.35 to 0.9)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((count, 256, 256)).astype(np.float32)
    smooth = ndimage.gaussian_filter(noise, (0, 3, 3)) * 12 + ndimage.gaussian_filter(noise, (0, 0.7, 0.7)) * 2
    steepness = 1 + np.arange(count)[:, None, None] % 8
    out: np.ndarray = (smooth * steepness).astype(np.float32)
    return out


# ------------------------------------------------------------------------------------------------
# the clean-up


@pytest.mark.parametrize(("hole", "sprinkle"), [(40, 0), (0, 40), (25, 60), (300, 300)])
def test_clean_up_is_meta_s_postprocess_masks(hole: int, sprinkle: int) -> None:
    logits = _logits(3)
    theirs = amg_reference.transforms(hole, sprinkle).postprocess_masks(torch.from_numpy(logits)[None], (300, 451))
    ours = upscale_logits(clean_logits(logits, Cleanup(hole, sprinkle)), 300, 451)
    changed = int((clean_logits(logits, Cleanup(hole, sprinkle)) != logits).sum())
    assert changed > 500  # the clean-up did something (Meta's code did not skip it with a warning)
    np.testing.assert_allclose(ours, theirs[0].numpy(), atol=1e-5)  # the upscale's own rounding
    assert np.array_equal(ours > 0, theirs[0].numpy() > 0)


def test_regions_are_8_connected_and_touching_the_border_counts() -> None:
    selected = np.zeros((8, 8), bool)
    selected[1, 1] = selected[2, 2] = True  # diagonal neighbours: one region of 2
    selected[0, 6:8] = True  # at the border: a region of 2 all the same
    selected[5:8, 4:7] = True  # 9 pixels
    small = small_regions(selected, 2)
    assert small[1, 1] and small[2, 2] and small[0, 6] and not small[5, 5]
    assert not small_regions(selected, 1).any()


def test_clean_up_off_changes_nothing() -> None:
    logits = _logits(1)
    assert clean_logits(logits, Cleanup()) is logits


# ------------------------------------------------------------------------------------------------
# the generator's steps


def test_the_grid_is_meta_s() -> None:
    amg_reference.install_standins()
    from sam2.utils.amg import build_point_grid

    for n in (1, 4, 32):
        np.testing.assert_array_equal(amg.point_grid(n), build_point_grid(n))


def test_stability_boxes_and_rle_are_meta_s() -> None:
    amg_reference.install_standins()
    from sam2.utils.amg import batched_mask_to_box, calculate_stability_score, mask_to_rle_pytorch

    up = torch.from_numpy(np.stack([upscale_logits(one, HEIGHT, WIDTH) for one in _logits(6)]))
    up[5] = -5.0  # an empty mask
    theirs = calculate_stability_score(up, 0.0, 1.0).numpy()
    inter = (up > 1.0).flatten(1).sum(1).numpy()
    union = (up > -1.0).flatten(1).sum(1).numpy()
    ours = amg.stability_score(inter, union)
    np.testing.assert_array_equal(ours[:5], theirs[:5])
    assert np.isnan(ours[5]) and np.isnan(theirs[5])
    masks = up > 0
    boxes = batched_mask_to_box(masks).numpy()
    np.testing.assert_array_equal(np.stack([amg.meta_box(m.numpy()) for m in masks]), boxes)
    np.testing.assert_array_equal(segment_sam_torch.boxes_of(masks).numpy(), boxes)
    for mine, rle in zip(masks, mask_to_rle_pytorch(masks), strict=True):
        assert rle_counts(mine.numpy()).tolist() == rle["counts"]


def _boxes(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    x0 = rng.integers(0, 80, count)
    y0 = rng.integers(0, 80, count)
    boxes = np.stack([x0, y0, x0 + rng.integers(0, 40, count), y0 + rng.integers(0, 40, count)], axis=1)
    boxes[:3] = [0, 0, 0, 0]  # empty masks: zero area, never suppressing nor suppressed
    scores = rng.random(count).astype(np.float32)
    scores[10:14] = scores[9]  # ties
    return boxes.astype(np.int64), scores


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.7, 1.0])
def test_nms_is_the_textbook_loop(threshold: float) -> None:
    boxes, scores = _boxes(np.random.default_rng(5), 300)
    ours = amg.nms(boxes, scores, threshold)
    theirs = amg_reference.plain_nms(torch.from_numpy(boxes).float(), torch.from_numpy(scores), threshold)
    assert ours.tolist() == theirs.tolist()
    if 0 < threshold < 1:
        assert 3 < len(ours) < 300


def _settings(**kw: float) -> mask_generator.Everything:
    base = {"pred_iou_thresh": 0.5, "stability_score_thresh": 0.6}
    return mask_generator.Everything(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "settings",
    [_settings(), _settings(min_mask_region_area=80), _settings(pred_iou_thresh=0.0, stability_score_thresh=0.0)],
    ids=["filters", "clean-up", "no-filters"],
)
def test_the_torch_steps_answer_what_the_numpy_steps_answer(settings: mask_generator.Everything) -> None:
    n = 8
    low_res = _logits(n * 3, seed=11).reshape(n, 3, 256, 256)
    ious = np.random.default_rng(2).random((n, 3)).astype(np.float32)
    points = mask_generator.grid_points(3, HEIGHT, WIDTH)[:n]
    ours = mask_generator.batch_candidates(low_res, ious, points, HEIGHT, WIDTH, settings=settings)
    on_torch = torch_steps.batch_candidates(
        torch.from_numpy(low_res), torch.from_numpy(ious), points, HEIGHT, WIDTH, settings=settings
    )
    assert 0 < len(ours) <= 3 * n and len(ours) == len(on_torch)
    assert [c.tolist() for c in ours.counts] == [c.tolist() for c in on_torch.counts]
    np.testing.assert_array_equal(ours.boxes, on_torch.boxes)
    np.testing.assert_array_equal(ours.ious, on_torch.ious)
    np.testing.assert_allclose(ours.stability, on_torch.stability, rtol=1e-6)
    np.testing.assert_array_equal(ours.points, on_torch.points)
    chunked = torch_steps.CHUNK_BYTES
    try:
        torch_steps.CHUNK_BYTES = 4 * HEIGHT * WIDTH * 2  # two masks at a time: the same answer
        again = torch_steps.batch_candidates(
            torch.from_numpy(low_res), torch.from_numpy(ious), points, HEIGHT, WIDTH, settings=settings
        )
    finally:
        torch_steps.CHUNK_BYTES = chunked
    assert [c.tolist() for c in again.counts] == [c.tolist() for c in on_torch.counts]
