"""Prompts from the wire: edges included, labels mapped to SAM's 1/0, mask logits little-endian.
(Every refusal is exercised through the real service in tests/integration/test_segment.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from craftai_common.errors import ServiceError
from craftai_infer import prompts
from craftai_wire.v1 import infer_pb2

FG, BG = infer_pb2.POINT_LABEL_FOREGROUND, infer_pb2.POINT_LABEL_BACKGROUND


def test_points_on_the_edges_and_a_box_of_the_whole_picture_are_inside() -> None:
    prompt = infer_pb2.Prompt(
        points=[infer_pb2.Point(x=0, y=0, label=FG), infer_pb2.Point(x=40, y=30, label=BG)],
        box=infer_pb2.Box(x0=0, y0=0, x1=40, y1=30),
    )
    sam = prompts.check(prompt, max_points=64).within(40, 30)
    np.testing.assert_array_equal(sam.points, [[0, 0], [40, 30]])
    np.testing.assert_array_equal(sam.labels, [1, 0])
    assert sam.box == (0, 0, 40, 30) and sam.mask_input is None


@pytest.mark.parametrize(("x", "y"), [(40.01, 5), (5, 30.01), (-0.01, 5), (5, -0.01)])
def test_just_outside_is_refused_naming_the_point(x: float, y: float) -> None:
    prompt = infer_pb2.Prompt(points=[infer_pb2.Point(x=1, y=1, label=FG), infer_pb2.Point(x=x, y=y, label=FG)])
    checked = prompts.check(prompt, max_points=64)
    with pytest.raises(ServiceError) as caught:
        checked.within(40, 30)
    assert caught.value.violations[0][0] == "prompt.points[1]" and "outside the 40x30 picture" in caught.value.message


def test_exactly_the_point_limit_is_accepted() -> None:
    prompt = infer_pb2.Prompt(points=[infer_pb2.Point(x=1, y=1, label=FG)] * 3)
    assert len(prompts.check(prompt, max_points=3).points) == 3
    with pytest.raises(ServiceError, match="at most 2 are accepted"):
        prompts.check(prompt, max_points=2)


def test_mask_logits_round_trip_as_float32_little_endian() -> None:
    logits = np.random.default_rng(0).normal(size=(256, 256)).astype(np.float32)
    message = prompts.low_res_message(logits)
    assert (message.width, message.height, len(message.logits)) == (256, 256, 262_144)
    assert message.logits[:4] == logits[0, 0].astype("<f4").tobytes()
    prompt = infer_pb2.Prompt(points=[infer_pb2.Point(x=1, y=1, label=FG)], mask_input=message)
    back = prompts.check(prompt, max_points=64).mask_input
    assert back is not None
    np.testing.assert_array_equal(back, logits)
