"""Properties of request validation (hypothesis), and a short bounded fuzz of picture decoding.

Whatever a client sends, the checks either accept it with a result that keeps their promises, or
raise ServiceError INVALID_ARGUMENT naming the field: never another exception (which would reach
the app as INTERNAL). Bounded by example counts so that CI spends seconds here.
"""

from __future__ import annotations

import io
import math

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from craftai_common.errors import ServiceError
from craftai_infer import pictures, prompts
from craftai_infer.pipelines.picture_convert import over_white
from craftai_wire.v1 import infer_pb2

LIMITS = pictures.Limits(max_pixels=4_000_000, max_side=4096)
MAX_POINTS = 8
QUICK = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

coordinates = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.floats(min_value=-10, max_value=300, width=32),
)
labels = st.sampled_from([0, 1, 2, 7, -1])
points = st.lists(st.tuples(coordinates, coordinates, labels), max_size=MAX_POINTS + 3)
boxes = st.none() | st.tuples(coordinates, coordinates, coordinates, coordinates)
masks = st.none() | st.tuples(st.sampled_from([0, 128, 256, 300]), st.sampled_from([0, 128, 256]), st.booleans())


def _prompt(
    pts: list[tuple[float, float, int]],
    box: tuple[float, float, float, float] | None,
    mask: tuple[int, int, bool] | None,
) -> infer_pb2.Prompt:
    prompt = infer_pb2.Prompt()
    for x, y, label in pts:
        prompt.points.append(infer_pb2.Point(x=x, y=y, label=label))  # type: ignore[arg-type]
    if box is not None:
        prompt.box.CopyFrom(infer_pb2.Box(x0=box[0], y0=box[1], x1=box[2], y1=box[3]))
    if mask is not None:
        side, height, finite = mask
        values = np.zeros((side, height), dtype="<f4")
        if not finite and values.size:
            values.flat[0] = np.nan
        prompt.mask_input.CopyFrom(infer_pb2.LowResMask(logits=values.tobytes(), width=side, height=height))
    return prompt


def _assert_plain_refusal(error: ServiceError) -> None:
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.message and error.violations and error.violations[0][0].startswith("prompt")


@QUICK
@given(points, boxes, masks, st.integers(1, 300), st.integers(1, 300))
def test_a_prompt_is_accepted_within_the_picture_or_refused_naming_its_field(
    pts: list[tuple[float, float, int]],
    box: tuple[float, float, float, float] | None,
    mask: tuple[int, int, bool] | None,
    width: int,
    height: int,
) -> None:
    message = _prompt(pts, box, mask)
    try:
        checked = prompts.check(message, MAX_POINTS)
        sam = checked.within(width, height)
    except ServiceError as error:
        _assert_plain_refusal(error)
        return
    assert len(pts) + (box is not None) > 0 and len(pts) <= MAX_POINTS
    for x, y in np.asarray(sam.points).tolist():
        assert math.isfinite(x) and math.isfinite(y) and 0 <= x <= width and 0 <= y <= height
    assert set(np.asarray(sam.labels).tolist()) <= {0, 1}
    if sam.box is not None:
        x0, y0, x1, y1 = sam.box
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
    if sam.mask_input is not None:
        assert sam.mask_input.shape == (256, 256) and np.isfinite(sam.mask_input).all()


@QUICK
@given(st.integers(0, 40))
def test_the_point_limit_is_exact(count: int) -> None:
    message = _prompt([(1.0, 1.0, 1)] * count, None, None)
    if count == 0 or count > MAX_POINTS:
        with pytest.raises(ServiceError) as caught:
            prompts.check(message, MAX_POINTS)
        assert caught.value.reason == ("TOO_MANY_POINTS" if count else "BAD_PROMPT")
    else:
        assert len(prompts.check(message, MAX_POINTS).points) == count


def _seed_pictures() -> dict[str, bytes]:
    gradient = np.add.outer(np.arange(24, dtype=np.uint8) * 9, np.arange(32, dtype=np.uint8) * 7)
    picture = Image.fromarray(np.stack([gradient, gradient[::-1], gradient[:, ::-1]], axis=2))
    seeds = {}
    for fmt, options in (("PNG", {}), ("JPEG", {"quality": 90}), ("WEBP", {"quality": 80})):
        out = io.BytesIO()
        picture.save(out, format=fmt, **options)
        seeds[fmt] = out.getvalue()
    out = io.BytesIO()
    Image.fromarray(gradient.astype(np.uint16) * 200).save(out, format="PNG")
    seeds["PNG16"] = out.getvalue()
    return seeds


SEEDS = _seed_pictures()


def _decode_is_safe(data: bytes) -> None:
    try:
        image = pictures.decode(data, LIMITS)
    except ServiceError as error:
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT and error.message
        assert error.reason in ("BAD_PICTURE", "EMPTY_PICTURE", "PICTURE_TOO_LARGE")
        return
    height, width = image.shape[:2]
    assert 0 < width * height <= LIMITS.max_pixels and max(width, height) <= LIMITS.max_side
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] in (3, 4)  # the one picture type
    assert over_white(image).shape == (height, width, 3)  # what the pipelines do next must work too


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(SEEDS)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=12),
    st.integers(0, 10_000),
)
def test_fuzz_damaged_pictures_are_refused_in_plain_words(seed: str, changes: list[tuple[int, int]], cut: int) -> None:
    """Bytes changed here and there, and the file cut short, from each format's valid file."""
    data = bytearray(SEEDS[seed])
    for offset, value in changes:
        data[offset % len(data)] = value
    if cut:
        del data[max(8, len(data) - cut) :]
    _decode_is_safe(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2048))
def test_fuzz_arbitrary_bytes_are_refused_in_plain_words(data: bytes) -> None:
    _decode_is_safe(data)
