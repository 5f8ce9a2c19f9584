"""What a call asks of its masks (craftai_infer.masks.check_output): the low-res logits only when
asked, and never from segment everything, which answers none."""

from __future__ import annotations

import pytest

from craftai_common.errors import ServiceError
from craftai_infer import masks
from craftai_wire.v1 import infer_pb2


def test_low_res_logits_are_answered_only_when_asked() -> None:
    assert not masks.check_output(infer_pb2.MaskOutput(), masks.PNG).low_res
    assert masks.check_output(infer_pb2.MaskOutput(low_res=True), masks.PNG).low_res


def test_segment_everything_refuses_low_res_naming_the_field() -> None:
    with pytest.raises(ServiceError) as refused:
        masks.check_output(infer_pb2.MaskOutput(low_res=True), masks.RLE, cleanup_allowed=False)
    assert refused.value.violations == [("output.low_res", refused.value.message)]
    assert "answers no low-res logits" in refused.value.message
