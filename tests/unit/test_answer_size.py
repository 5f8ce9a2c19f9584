"""features/run.py `check_size`: an answer over the message limit is refused in words; the pictures'
own bytes, where the caller names them, spare measuring an answer far under the limit (measuring
serialises it), never one near it."""

from __future__ import annotations

import grpc
import pytest

from craftai_common.errors import ServiceError
from craftai_infer.features.run import BESIDE_PAYLOAD, check_size
from craftai_wire.v1 import infer_pb2

LIMIT = 4 * BESIDE_PAYLOAD


def _answer(picture_bytes: int, notices: int = 0) -> infer_pb2.MatteResult:
    answer = infer_pb2.MatteResult(width=10, height=10)
    answer.matte.data = b"\x01" * picture_bytes
    answer.route.recipe = "u2netp" + "-" * notices
    return answer


def test_an_answer_over_the_limit_is_refused_with_or_without_its_payload_named() -> None:
    over = _answer(LIMIT)  # the picture alone fills the limit: its tags make it larger
    for payload in (None, LIMIT):
        with pytest.raises(ServiceError) as raised:
            check_size(over, LIMIT, "the matte", "ask for less", payload=payload)
        assert raised.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"more than the {LIMIT:,} bytes a message may carry" in raised.value.message


def test_near_the_limit_the_answer_is_measured_exactly() -> None:
    """Pictures within BESIDE_PAYLOAD of the limit: the answer's own size decides, both ways."""
    fits = _answer(LIMIT - 100)
    check_size(fits, LIMIT, "the matte", "ask for less", payload=LIMIT - 100)
    grown = _answer(LIMIT - 100, notices=200)  # the fields beside the picture push it over
    with pytest.raises(ServiceError):
        check_size(grown, LIMIT, "the matte", "ask for less", payload=LIMIT - 100)


def test_far_under_the_limit_the_named_payload_decides() -> None:
    check_size(_answer(1000), LIMIT, "the matte", "ask for less", payload=1000)
    check_size(_answer(LIMIT - BESIDE_PAYLOAD), LIMIT, "the matte", "ask for less", payload=LIMIT - BESIDE_PAYLOAD)
