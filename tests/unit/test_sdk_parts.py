"""The SDK's transport-free parts: the retry policy's decisions, request building and result
parsing (what an asyncio client will share with the blocking one)."""

from __future__ import annotations

import grpc
import pytest

from craftai import LowResMask, Point, Retries
from craftai.calls import prompt, resolve_request, setup_request
from craftai.errors import CraftAiError
from craftai.outputs import segment_output
from craftai.policy import RetryPlan
from craftai_wire.v1 import common_pb2, infer_pb2

LOST = CraftAiError(grpc.StatusCode.UNAVAILABLE, "the service did not answer (UNAVAILABLE): connection reset")


def test_a_lost_connection_is_tried_again_with_a_doubling_backoff_up_to_its_cap() -> None:
    plan = RetryPlan(Retries(attempts=5, backoff=1.0, max_backoff=3.0))
    pauses = []
    for _ in range(5):
        pauses.append(plan.pause(LOST, reached=True))
        plan.tried(0.0)
    assert pauses == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert plan.pause(LOST, reached=True) is None  # no try left


def test_the_servers_retry_info_is_the_pause_within_the_cap() -> None:
    stopping = CraftAiError(grpc.StatusCode.UNAVAILABLE, "shutting down", "SHUTTING_DOWN", retry_after=1.0)
    assert Retries(backoff=0.25).plan().pause(stopping, reached=True) == 1.0
    slow = CraftAiError(grpc.StatusCode.UNAVAILABLE, "shutting down", "SHUTTING_DOWN", retry_after=60.0)
    assert Retries(max_backoff=5.0).plan().pause(slow, reached=True) == 5.0


@pytest.mark.parametrize(
    "error",
    [
        CraftAiError(grpc.StatusCode.UNAVAILABLE, "every source failed", "SOURCES_FAILED"),  # an answer
        CraftAiError(grpc.StatusCode.NOT_FOUND, "no such session", "SESSION_NOT_FOUND"),
        CraftAiError(grpc.StatusCode.DEADLINE_EXCEEDED, "too slow"),
        CraftAiError(grpc.StatusCode.INTERNAL, "the stream ended without a result"),
    ],
)
def test_answers_are_never_tried_again(error: CraftAiError) -> None:
    assert Retries().plan().pause(error, reached=True) is None


def test_a_server_never_reached_is_not_waited_for() -> None:
    assert Retries().plan().pause(LOST, reached=False) is None


def test_the_wait_for_the_server_shares_one_budget_across_tries() -> None:
    plan = Retries(wait_seconds=20.0).plan()
    assert plan.wait_left(0.5) == 19.5
    plan.tried(15.0)
    assert plan.wait_left(1.0) == 4.0
    plan.tried(10.0)
    assert plan.wait_left(0.0) == 0.0


def test_a_prompt_from_points_tuples_a_box_and_a_previous_answer() -> None:
    low = LowResMask(b"\0" * 16, 2, 2)
    built = prompt([(1, 2), (3, 4, False), Point(5, 6)], (0, 0, 10, 10), low, all_masks=True)
    assert [(p.x, p.y, p.label) for p in built.points] == [
        (1, 2, infer_pb2.POINT_LABEL_FOREGROUND),
        (3, 4, infer_pb2.POINT_LABEL_BACKGROUND),
        (5, 6, infer_pb2.POINT_LABEL_FOREGROUND),
    ]
    assert (built.box.x1, built.box.y1, built.all_masks) == (10, 10, True)
    assert (built.mask_input.width, built.mask_input.height, len(built.mask_input.logits)) == (2, 2, 16)
    assert prompt([], None, b"\1" * 8, False).mask_input.width == 256  # raw logits: the 256x256 default
    with pytest.raises(ValueError, match="four numbers"):
        prompt([], (1, 2, 3), None, False)


def test_setup_and_resolve_carry_no_machine_info() -> None:
    """Engine advice is the catalogue's: it asks the infer service itself."""
    assert not setup_request("image.matte").HasField("gpu_available")
    request = resolve_request("image.matte", "u2netp")
    assert not request.HasField("machine") and (request.route.recipe, request.route.engine) == ("u2netp", "")


def test_a_segment_result_becomes_masks_best_first() -> None:
    result = infer_pb2.SegmentResult(
        masks=[
            infer_pb2.Mask(png=b"best", predicted_iou=0.9, selected_fraction=0.25, low_res=infer_pb2.LowResMask()),
            infer_pb2.Mask(png=b"next", predicted_iou=0.5, empty=True),
        ],
        width=4,
        height=3,
        route=common_pb2.RouteRef(feature="image.segment", recipe="sam2-hiera-tiny", engine="onnxruntime"),
        device="cpu",
        session_id="s1",
        timing=common_pb2.Timing(stages_ms={"model": 2.0}, total_ms=3.0),
    )
    output = segment_output(result, ["a notice"], reopened=True, request_id="r1")
    assert output.best.png == b"best" and output.masks[1].empty
    assert (output.width, output.height, output.recipe, output.session_id) == (4, 3, "sam2-hiera-tiny", "s1")
    assert (output.timing_ms, output.server_ms, output.notices) == ({"model": 2.0}, 3.0, ["a notice"])
    assert output.reopened and output.request_id == "r1"
