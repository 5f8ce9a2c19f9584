"""SAM 2.1 pre/post-processing (samexporter contract): coordinates, box order, mask feed, resampling, answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

from craftai_infer.pipelines import segment_sam
from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_infer.routes.sam2_onnx import SamOnnxRunner
from craftai_models import onnx_sessions

# ------------------------------------------------------------------------------------------------
# prompts


def test_points_are_scaled_per_axis_to_the_1024_square() -> None:
    feed = segment_sam.encode_prompt(SamPrompt(points=[(451, 300), (0, 0), (225.5, 150)], labels=[1, 0, 1]), 300, 451)
    np.testing.assert_allclose(feed["point_coords"][0], [[1024, 1024], [0, 0], [512, 512]], rtol=1e-6)
    assert feed["point_coords"].shape == (1, 3, 2) and feed["point_coords"].dtype == np.float32
    np.testing.assert_array_equal(feed["point_labels"], [[1, 0, 1]])
    assert feed["point_labels"].dtype == np.float32


def test_coordinates_are_not_padded_the_decoder_appends_its_own_padding_point() -> None:
    feed = segment_sam.encode_prompt(SamPrompt(points=[(10, 20)], labels=[1]), 100, 100)
    assert feed["point_coords"].shape == (1, 1, 2)
    assert -1 not in feed["point_labels"]


def test_the_box_goes_first_as_two_corners_labelled_2_and_3() -> None:
    prompt = SamPrompt(points=[(40, 30), (5, 6)], labels=[1, 0], box=(10, 20, 110, 220))
    feed = segment_sam.encode_prompt(prompt, 400, 200)
    np.testing.assert_array_equal(feed["point_labels"], [[2, 3, 1, 0]])
    expected = np.array([[10, 20], [110, 220], [40, 30], [5, 6]]) * [1024 / 200, 1024 / 400]
    np.testing.assert_allclose(feed["point_coords"][0], expected, rtol=1e-6)


def test_a_box_alone_and_a_box_drawn_backwards() -> None:
    feed = segment_sam.encode_prompt(SamPrompt(box=(110, 220, 10, 20)), 1024, 1024)
    np.testing.assert_allclose(feed["point_coords"][0], [[10, 20], [110, 220]])
    np.testing.assert_array_equal(feed["point_labels"], [[2, 3]])


def test_mask_feed_without_and_with_a_previous_answer() -> None:
    feed = segment_sam.encode_prompt(SamPrompt(points=[(1, 1)], labels=[1]), 10, 10)
    assert feed["mask_input"].shape == (1, 1, 256, 256) and not feed["mask_input"].any()
    np.testing.assert_array_equal(feed["has_mask_input"], [0.0])
    previous = np.random.default_rng(0).normal(size=(256, 256)).astype(np.float32)
    for shape in [(256, 256), (1, 256, 256), (1, 1, 256, 256)]:
        feed = segment_sam.encode_prompt(
            SamPrompt(points=[(1, 1)], labels=[1], mask_input=previous.reshape(shape)), 10, 10
        )
        np.testing.assert_array_equal(feed["mask_input"][0, 0], previous)
        np.testing.assert_array_equal(feed["has_mask_input"], [1.0])


@pytest.mark.parametrize(
    ("prompt", "words"),
    [
        (SamPrompt(), "at least one point or a box"),
        (SamPrompt(mask_input=np.zeros((256, 256), np.float32)), "at least one point or a box"),
        (SamPrompt(points=[(1, 2)], labels=[]), "1 points but 0 labels"),
        (SamPrompt(points=[(1, 2)], labels=[2]), "labels must be 1 (foreground) or 0 (background)"),
        (SamPrompt(points=[(np.nan, 2)], labels=[1]), "finite"),
        (SamPrompt(box=(1, 2, 3)), "four numbers"),
        (SamPrompt(points=[(1, 2)], labels=[1], mask_input=np.zeros((64, 64), np.float32)), "256x256"),
        (SamPrompt(points=[(1, 2)], labels=[1], mask_input=np.full((256, 256), np.inf, np.float32)), "finite"),
    ],
)
def test_bad_prompts_are_refused_in_plain_words(prompt: SamPrompt, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        segment_sam.encode_prompt(prompt, 100, 100)


# ------------------------------------------------------------------------------------------------
# pictures


def test_preprocess_gives_normalised_float32_nchw() -> None:
    picture = np.full((7, 5, 3), (255, 0, 128), np.uint8)
    x = segment_sam.preprocess(picture)
    assert x.shape == (1, 3, 1024, 1024) and x.dtype == np.float32 and x.flags.c_contiguous
    expected = (np.array([1.0, 0.0, 128 / 255]) - segment_sam.MEAN) / segment_sam.STD
    np.testing.assert_allclose(x[0, :, 500, 300], expected, rtol=1e-6)


def test_a_1024_square_picture_is_not_resampled() -> None:
    picture = np.random.default_rng(1).integers(0, 256, (1024, 1024, 3), dtype=np.uint8)
    resized = segment_sam.resize_antialiased(picture)
    np.testing.assert_array_equal(resized, picture.astype(np.float32) / np.float32(255))


@pytest.mark.parametrize(("height", "width"), [(300, 451), (1500, 2000), (3, 7), (1024, 1), (2049, 1023)])
def test_resize_matches_torch_antialiased_bilinear(height: int, width: int) -> None:
    """Same as torchvision's Resize((1024, 1024)) on a tensor, shrinking (antialiased) or enlarging."""
    picture = np.random.default_rng(height * width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    tensor = torch.from_numpy(picture.transpose(2, 0, 1).copy()).float().div(255)[None]
    reference = F.interpolate(tensor, size=(1024, 1024), mode="bilinear", align_corners=False, antialias=True)
    ours = segment_sam.resize_antialiased(picture).transpose(2, 0, 1)
    assert np.abs(ours - reference[0].numpy()).max() < 2e-6


@pytest.mark.parametrize(
    "picture",
    [
        np.zeros((10, 10), np.uint8),
        np.zeros((10, 10, 4), np.uint8),
        np.zeros((10, 10, 3), np.float32),
        np.zeros((0, 10, 3), np.uint8),
    ],
)
def test_pictures_that_are_not_rgb8_are_refused(picture: npt.NDArray[np.generic]) -> None:
    with pytest.raises(ValueError, match="picture"):
        segment_sam.preprocess(picture)


# ------------------------------------------------------------------------------------------------
# answers


@pytest.mark.parametrize(("height", "width"), [(1, 1), (3, 7), (255, 257), (451, 300), (1023, 1025), (1200, 1600)])
def test_upscaling_gives_exactly_the_picture_size_and_matches_torch(height: int, width: int) -> None:
    low_res = np.random.default_rng(height + width).normal(0, 8, (3, 256, 256)).astype(np.float32)
    up = segment_sam.upscale_logits(low_res, height, width)
    assert up.shape == (3, height, width) and up.dtype == np.float32
    reference = F.interpolate(
        torch.from_numpy(low_res)[None], size=(height, width), mode="bilinear", align_corners=False
    )[0].numpy()
    assert np.abs(up - reference).max() < 1e-5


def test_constant_logits_upscale_to_the_same_constant() -> None:
    up = segment_sam.upscale_logits(np.full((1, 256, 256), -3.5, np.float32), 5, 9)
    np.testing.assert_array_equal(up, np.full((1, 5, 9), -3.5, np.float32))


def _three() -> npt.NDArray[np.float32]:
    low_res = np.full((1, 3, 256, 256), -5.0, np.float32)
    low_res[0, 0, :, :128] = 5.0  # left half
    low_res[0, 1, :128, :] = 5.0  # top half
    low_res[0, 2] = 5.0  # everything
    return low_res


def test_only_the_best_mask_by_predicted_iou_unless_all_are_asked() -> None:
    ious = np.array([[0.2, 0.9, 0.5]], np.float32)
    best = segment_sam.postprocess(_three(), ious, 40, 60)
    assert best.masks.shape == (1, 40, 60) and best.masks.dtype == np.bool_
    np.testing.assert_array_equal(best.indices, [1])
    assert best.masks[0, :20].all() and not best.masks[0, 20:].any()  # token 1: the top half
    np.testing.assert_allclose(best.ious, [0.9])
    assert best.low_res.shape == (1, 256, 256)

    every = segment_sam.postprocess(_three(), ious, 40, 60, all_masks=True)
    np.testing.assert_array_equal(every.indices, [1, 2, 0])  # best first
    np.testing.assert_allclose(every.ious, [0.9, 0.5, 0.2])
    np.testing.assert_allclose(every.fractions, [0.5, 1.0, 0.5])
    assert every.masks[1].all() and every.masks[2][:, :30].all() and not every.masks[2][:, 30:].any()
    np.testing.assert_array_equal(every.low_res[0], _three()[0, 1])


def test_ties_keep_the_decoder_order() -> None:
    np.testing.assert_array_equal(
        segment_sam.order_by_score(np.array([0.5, 0.7, 0.7], np.float32), all_masks=True), [1, 2, 0]
    )


def test_an_all_zero_mask_is_flagged_empty_not_an_error() -> None:
    low_res = np.full((1, 3, 256, 256), -2.0, np.float32)
    low_res[0, 1, 100:110, 100:110] = 4.0
    answer = segment_sam.postprocess(low_res, np.array([[0.9, 0.1, 0.3]], np.float32), 300, 451, all_masks=True)
    np.testing.assert_array_equal(answer.indices, [0, 2, 1])
    np.testing.assert_array_equal(answer.empty, [True, True, False])
    assert answer.fractions[0] == 0.0 and not answer.masks[0].any()
    assert 0.0 < answer.fractions[2] < 0.01
    assert answer.fractions[2] == answer.masks[2].mean()
    best = segment_sam.postprocess(low_res, np.array([[0.9, 0.1, 0.3]], np.float32), 300, 451)
    assert best.empty.tolist() == [True] and best.fractions.tolist() == [0.0]


def test_zero_logits_are_not_selected() -> None:
    answer = segment_sam.postprocess(np.zeros((3, 256, 256), np.float32), np.array([0.1, 0.2, 0.3], np.float32), 8, 8)
    assert answer.empty.all()


# ------------------------------------------------------------------------------------------------
# runner


def test_cpu_is_always_the_last_provider() -> None:
    assert onnx_sessions.providers("cpu") == ["CPUExecutionProvider"]
    assert onnx_sessions.providers("cuda")[-1] == "CPUExecutionProvider"


def test_runner_refuses_files_of_another_contract(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("image_embeddings", TensorProto.FLOAT, [1, 3, 4, 4])
    graph = helper.make_graph([helper.make_node("Identity", ["pixel_values"], ["image_embeddings"])], "other", [x], [y])
    path = tmp_path / "other.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    with pytest.raises(ValueError, match="not a SAM 2 samexporter encoder"):
        SamOnnxRunner(path, path, use_gpu=False)


def test_grid_point_feeds_are_each_click_s_encode_prompt() -> None:
    """The generator's batch of clicks, made at once, gives the decoder what each click's own
    encode_prompt gives (the torch route feeds it; the mask feeds are zeros there)."""
    from craftai_infer.pipelines.mask_generator import grid_points
    from craftai_infer.pipelines.segment_sam import grid_point_feeds

    points = grid_points(7, 301, 451)
    coords, labels = grid_point_feeds(points, 301, 451)
    feeds = [
        segment_sam.encode_prompt(SamPrompt(points=[(float(x), float(y))], labels=[1]), 301, 451) for x, y in points
    ]
    assert coords.dtype == labels.dtype == np.float32
    np.testing.assert_array_equal(coords, np.concatenate([f["point_coords"] for f in feeds]))
    np.testing.assert_array_equal(labels, np.concatenate([f["point_labels"] for f in feeds]))
    assert all(not f["has_mask_input"].any() and not f["mask_input"].any() for f in feeds)
