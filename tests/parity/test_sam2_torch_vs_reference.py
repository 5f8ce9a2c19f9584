"""This project's SAM 2.1 tiny network against Meta's modules, same random weights, fp32 on the CPU.

The Meta model is the test-only reference `sam2==1.1.0` (tools/install_references.sh). Encoder
inputs are random pictures at a small non-square size (exercises window padding and the
interpolated position table) and at the real 1024²; decoder inputs are random embeddings with
prompts of every kind the contract allows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from craftai_models.sam2.fpn_neck import sine_position_encoding
from craftai_models.sam2.model import Sam2ImageModel, build_sam21_tiny, state_dict_from_meta
from tests.parity.sam2_meta import MetaModel, build_meta_sam21_tiny, meta_decode, meta_encode

# fp32 CPU, same weights: the two implementations differ only in the order of float operations.
ENCODER_ATOL = 1e-4  # on features of magnitude ~1-10
LOGIT_ATOL = 1e-4  # on mask logits (clamped to ±32)
IOU_ATOL = 1e-5  # on sigmoid IoU predictions


@pytest.fixture(scope="module")
def meta() -> MetaModel:
    return build_meta_sam21_tiny()


@pytest.fixture(scope="module")
def ours(meta: MetaModel) -> Sam2ImageModel:
    return build_sam21_tiny(state_dict_from_meta(meta.state_dict()))


@pytest.fixture(autouse=True)
def _no_grad() -> Iterator[None]:
    with torch.inference_mode():
        yield


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


def test_state_dict_maps_one_to_one(meta: MetaModel, ours: Sam2ImageModel) -> None:
    """Every tensor of this network comes from Meta's; of Meta's image path only the unused head is left."""
    meta_sd = meta.state_dict()
    mapped = state_dict_from_meta(meta_sd)
    assert set(mapped) == set(ours.state_dict())
    image_path = [k for k in meta_sd if k.startswith(("image_encoder.", "sam_prompt_encoder.", "sam_mask_decoder."))]
    left = sorted(k for k in image_path if not k.startswith("sam_mask_decoder.pred_obj_score_head."))
    assert len(left) + 1 == len(mapped)  # + no_mem_embed
    for key, value in ours.state_dict().items():
        assert torch.equal(value, mapped[key]), key


@pytest.mark.parametrize(("h", "w"), [(64, 64), (32, 48)])
def test_sine_position_encoding(meta: MetaModel, h: int, w: int) -> None:
    expected = meta.image_encoder.neck.position_encoding(torch.zeros(2, 256, h, w))
    assert max_diff(sine_position_encoding(2, h, w), expected) < 1e-6


def test_image_encoder_small_non_square(meta: MetaModel, ours: Sam2ImageModel) -> None:
    """320x256, batch 2: padded windows in stages 3-4, a non-square position table, batching."""
    image = torch.randn(2, 3, 320, 256, generator=torch.Generator().manual_seed(1))
    expected = meta.forward_image(image)["backbone_fpn"]  # conv_s0/conv_s1 already applied
    levels = ours.image_encoder(image)
    got = [*ours.mask_decoder.project_high_res(levels[0], levels[1]), levels[2]]
    assert [tuple(t.shape) for t in got] == [(2, 32, 80, 64), (2, 64, 40, 32), (2, 256, 20, 16)]
    for g, e in zip(got, expected, strict=True):
        assert max_diff(g, e) < ENCODER_ATOL


@pytest.mark.slow
def test_encode_full_size(meta: MetaModel, ours: Sam2ImageModel) -> None:
    image = torch.randn(1, 3, 1024, 1024, generator=torch.Generator().manual_seed(2))
    got = ours.encode(image)
    expected = meta_encode(meta, image)
    assert [tuple(t.shape) for t in got] == [(1, 32, 256, 256), (1, 64, 128, 128), (1, 256, 64, 64)]
    for g, e in zip(got, expected, strict=True):
        assert max_diff(g, e) < ENCODER_ATOL


def random_features(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, 32, 256, 256, generator=gen),
        torch.randn(batch, 64, 128, 128, generator=gen),
        torch.randn(batch, 256, 64, 64, generator=gen),
    )


# (name, points [(x, y, label)], with a previous mask)
PROMPTS = [
    ("one_fg_point", [(512.0, 384.0, 1)], False),
    ("fg_and_bg_points", [(100.0, 900.0, 1), (700.5, 20.25, 0), (1023.0, 0.0, 1)], False),
    ("box", [(200.0, 150.0, 2), (800.0, 700.0, 3)], False),
    ("box_and_point", [(200.0, 150.0, 2), (800.0, 700.0, 3), (500.0, 420.0, 0)], False),
    ("point_and_mask_feedback", [(300.0, 600.0, 1)], True),
    ("explicit_padding_points", [(10.0, 10.0, 1), (999.0, 3.0, -1), (0.0, 0.0, -1)], False),
]


def prompt_tensors(points: list[tuple[float, float, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    coords = torch.tensor([[[x, y] for x, y, _ in points]], dtype=torch.float32)
    labels = torch.tensor([[label for _, _, label in points]], dtype=torch.float32)
    return coords, labels


@pytest.mark.parametrize(("name", "points", "with_mask"), PROMPTS, ids=[p[0] for p in PROMPTS])
def test_decode_matches_meta(
    meta: MetaModel, ours: Sam2ImageModel, name: str, points: list[tuple[float, float, int]], with_mask: bool
) -> None:
    features = random_features(1, seed=3)
    coords, labels = prompt_tensors(points)
    mask = torch.randn(1, 1, 256, 256, generator=torch.Generator().manual_seed(4)) * 8
    masks, iou = ours.decode(
        features[2],
        features[0],
        features[1],
        coords,
        labels,
        mask if with_mask else torch.zeros(1, 1, 256, 256),
        torch.tensor([1.0 if with_mask else 0.0]),
    )
    expected_masks, expected_iou = meta_decode(meta, features, coords, labels, mask if with_mask else None)
    assert masks.shape == (1, 3, 256, 256) and iou.shape == (1, 3)
    assert max_diff(masks, expected_masks) < LOGIT_ATOL, name
    assert max_diff(iou, expected_iou) < IOU_ATOL, name
    assert (masks > 0).any() and (masks <= 0).any()  # the comparison is not between two constant maps


def test_decode_several_prompt_sets(meta: MetaModel, ours: Sam2ImageModel) -> None:
    """L prompt sets against one picture (batch-1 embeddings), each with its own has_mask_input."""
    features = random_features(1, seed=5)
    coords = torch.tensor(
        [[[100.0, 100.0], [800.0, 900.0]], [[512.0, 512.0], [0.0, 0.0]], [[50.0, 60.0], [70.0, 80.0]]]
    )
    labels = torch.tensor([[2.0, 3.0], [1.0, -1.0], [1.0, 0.0]])
    masks_in = torch.randn(3, 1, 256, 256, generator=torch.Generator().manual_seed(6)) * 8
    has_mask = torch.tensor([0.0, 1.0, 0.0])
    masks, iou = ours.decode(features[2], features[0], features[1], coords, labels, masks_in, has_mask)
    assert masks.shape == (3, 3, 256, 256) and iou.shape == (3, 3)
    # no mask anywhere: Meta's batched path (repeat_image) on the sets without a mask
    no_mask_sets = [0, 2]
    expected_masks, expected_iou = meta_decode(meta, features, coords[no_mask_sets], labels[no_mask_sets], None)
    assert max_diff(masks[no_mask_sets], expected_masks) < LOGIT_ATOL
    assert max_diff(iou[no_mask_sets], expected_iou) < IOU_ATOL
    # the set with a mask, alone
    expected_masks, expected_iou = meta_decode(meta, features, coords[1:2], labels[1:2], masks_in[1:2])
    assert max_diff(masks[1:2], expected_masks) < LOGIT_ATOL
    assert max_diff(iou[1:2], expected_iou) < IOU_ATOL


def test_decode_one_picture_per_prompt_set(ours: Sam2ImageModel) -> None:
    """Embeddings of batch L pair picture i with prompt set i; same answer as one call per pair."""
    features = random_features(2, seed=7)
    coords = torch.tensor([[[300.0, 200.0]], [[600.0, 700.0]]])
    labels = torch.ones(2, 1)
    masks_in, has_mask = torch.zeros(2, 1, 256, 256), torch.zeros(2)
    masks, iou = ours.decode(features[2], features[0], features[1], coords, labels, masks_in, has_mask)
    for i in range(2):
        one = [f[i : i + 1] for f in features]
        m, s = ours.decode(one[2], one[0], one[1], coords[i : i + 1], labels[i : i + 1], masks_in[:1], has_mask[:1])
        assert max_diff(masks[i : i + 1], m) < LOGIT_ATOL
        assert max_diff(iou[i : i + 1], s) < IOU_ATOL


def test_encode_refuses_other_sizes(ours: Sam2ImageModel) -> None:
    with pytest.raises(ValueError, match="1024"):
        ours.encode(torch.zeros(1, 3, 512, 512))
