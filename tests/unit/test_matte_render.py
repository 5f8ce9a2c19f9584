"""Which of image.matte's outputs are made, and where (craftai_infer.pipelines.matte_render): a
matte alone answered as the route gave it, with no torch needed; anything else made on the route's
device, or refused in words when torch cannot be imported."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from craftai_infer.pipelines import matte_render
from craftai_infer.pipelines.matte_spec import OutputsSpec

PICTURE = np.full((4, 5, 3), 200, np.uint8)
MATTE = np.tile(np.arange(0, 250, 50, dtype=np.uint8), (4, 1))


def test_a_matte_alone_is_answered_as_the_route_gave_it_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "craftai_infer.pipelines.matte_outputs", None)  # cannot be imported
    (answer,) = matte_render.rendered([(PICTURE, MATTE, OutputsSpec())], "cpu")
    assert answer.matte is MATTE  # no copy
    assert answer.cutout is None and answer.composite is None and answer.mask is None


def test_other_outputs_are_made_from_the_matte() -> None:
    spec = OutputsSpec(kinds=frozenset({"matte", "mask", "cutout"}))
    (answer,) = matte_render.rendered([(PICTURE, MATTE, spec)], "cpu")
    assert answer.matte is not None and np.array_equal(answer.matte, MATTE)
    assert answer.mask is not None and answer.mask.tolist() == (MATTE / 255 > 0.5).tolist()
    assert answer.cutout is not None and answer.cutout.shape == (4, 5, 4)


def test_outputs_that_need_torch_are_refused_where_it_cannot_be_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "craftai_infer.pipelines.matte_outputs", None)
    with pytest.raises(matte_render.TorchMissingError):
        matte_render.rendered([(PICTURE, MATTE, OutputsSpec(kinds=frozenset({"cutout"})))], "cpu")
