"""A matte of a part (u2net_cloth_seg's clothes): the option checked in plain words before any work,
the class map made into each part's matte as rembg's cloth session makes it, the parts stacked."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from craftai_common.errors import ServiceError
from craftai_infer import matte_options
from craftai_infer.pipelines import matte_u2net_cloth
from craftai_infer.pipelines.matte_spec import OutputsSpec
from craftai_infer.routes import MatteJob
from craftai_infer.routes.u2net_cloth_onnx import CLASS_OF, U2netClothOnnx
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import PARTS_OF, Part, Reason, Recipe


def _checked(part: str) -> matte_options.Checked:
    return matte_options.check(infer_pb2.MatteRequest(part=part), png_level=1)


def test_a_part_is_one_of_the_vocabularys_and_no_part_is_every_parts() -> None:
    assert _checked("lower").part == Part.LOWER
    assert _checked("").part is None
    with pytest.raises(ServiceError) as refused:
        _checked("Upper")
    error = refused.value
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, Reason.BAD_OPTIONS)
    assert "part is 'Upper'; a part is upper, lower, full (of a recipe with parts: u2net_cloth_seg)" in error.message
    assert [field for field, _ in error.violations] == ["part"]


def test_a_part_asked_of_a_recipe_without_parts_is_refused_naming_those_with_parts() -> None:
    _checked("full").for_recipe(Recipe.U2NET_CLOTH_SEG)
    _checked("").for_recipe(Recipe.U2NETP)
    with pytest.raises(ServiceError) as refused:
        _checked("full").for_recipe(Recipe.U2NETP)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.message == (
        "u2netp has no parts, so part 'full' cannot be asked of it; the recipes with parts: "
        "u2net_cloth_seg (upper, lower, full)"
    )


def test_the_route_names_the_vocabularys_parts_in_the_networks_class_order() -> None:
    assert U2netClothOnnx.parts == PARTS_OF[Recipe.U2NET_CLOTH_SEG]
    assert CLASS_OF == {"upper": 1, "lower": 2, "full": 3}


def _logits(classes: np.ndarray) -> np.ndarray:
    """f32[1, 4, H, W] logits whose argmax is `classes`."""
    return np.stack([(classes == c).astype(np.float32) for c in range(matte_u2net_cloth.CLASSES)])[None]


def test_each_part_is_its_class_at_the_pictures_size_and_the_parts_stack_top_to_bottom() -> None:
    side = matte_u2net_cloth.CLOTH.size
    classes = np.zeros((side, side), np.int64)
    classes[: side // 3] = 1
    classes[side // 3 : 2 * side // 3, : side // 2] = 2
    classes[2 * side // 3 :] = 3
    size = (side, side)  # no resize: the map is the classes exactly
    for part, index in CLASS_OF.items():
        (matte,) = [matte_u2net_cloth.mattes(_logits(classes), size, [index])]
        assert matte.dtype == np.uint8 and np.array_equal(matte, np.where(classes == index, 255, 0)), part
    stacked = matte_u2net_cloth.mattes(_logits(classes), (300, 200), [1, 2, 3])
    assert stacked.shape == (600, 300) and set(np.unique(stacked)) == {0, 255}
    top, middle, bottom = np.split(stacked, 3)
    assert top[:50].all() and not top[-50:].any() and bottom[-50:].all() and not middle[:50].any()


def test_lanczos_ringing_between_classes_gives_stray_classes_as_rembg_keeps_them() -> None:
    """Enlarged with Lanczos, an edge from background (0) to full (3) rings through 1 and 2 (and past
    3): the map keeps those values, as rembg's does, and each part's matte reads them as it does."""
    side = matte_u2net_cloth.CLOTH.size
    classes = np.zeros((side, side), np.int64)
    classes[:, side // 2 :] = 3
    enlarged = np.asarray(matte_u2net_cloth.class_map(_logits(classes), (3 * side, 8)))
    assert {1, 2}.issubset(set(np.unique(enlarged)))
    lower = matte_u2net_cloth.part_matte(matte_u2net_cloth.class_map(_logits(classes), (3 * side, 8)), 2)
    assert np.array_equal(lower == 255, enlarged == 2)


def test_without_a_part_the_outputs_are_made_of_the_picture_once_a_part() -> None:
    picture = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    route = U2netClothOnnx.__new__(U2netClothOnnx)  # its parts only: no file to load
    stacked = MatteJob(picture, OutputsSpec()).shown(route)
    assert np.array_equal(stacked, np.concatenate([picture] * 3))
    assert MatteJob(picture, OutputsSpec(), "upper").shown(route) is picture
