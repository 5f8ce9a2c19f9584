"""What BiRefNet's torch preparation decides from its proof's two distances (the checkpoint read in
each patch order against the recipe's published ONNX), and what its prepared record keeps: the
order, the configuration, the side and the float storage the route reads the checkpoint with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from craftai_models.birefnet import Architecture, PatchOrder, read_prepared, write_prepared
from craftai_prepare.converters.birefnet import LOGIT_RTOL, SEPARATION, OrderProof, refusal, undecided

PATCH, CHANNEL = PatchOrder.PATCH_MAJOR, PatchOrder.CHANNEL_MAJOR


def _proof(patch: float, channel: float) -> OrderProof:
    return OrderProof({PATCH: patch, CHANNEL: channel})


def test_the_recipes_order_reproduced_alone_is_proven() -> None:
    proof = _proof(2e-3, 0.9)
    assert refusal(PATCH, proof) is None and undecided(PATCH, proof) == ""


def test_the_other_order_reproduced_alone_is_refused_naming_it() -> None:
    why = refusal(PATCH, _proof(0.9, 2e-3))
    assert why is not None and 'patch_order for this file must be "channel-major"' in why


def test_a_checkpoint_that_reproduces_the_graph_in_neither_order_is_another_checkpoint() -> None:
    """Another training run's weights (a re-upload, a fine-tune) answer unlike the graph in both
    orders: served, they would not be the recipe's model."""
    why = refusal(PATCH, _proof(3 * LOGIT_RTOL, 0.8))
    assert why is not None and "in neither patch order" in why and "not the checkpoint of that graph" in why
    assert refusal(CHANNEL, _proof(0.8, 2 * LOGIT_RTOL)) is not None


def test_both_orders_reproducing_the_graph_leave_the_order_unproven_but_the_checkpoint_served() -> None:
    proof = _proof(1e-3, SEPARATION * 1e-3 / 2)
    assert refusal(PATCH, proof) is None
    assert "did not tell the two orders apart" in undecided(PATCH, proof)


@pytest.mark.parametrize(
    ("architecture", "floats", "named"),
    [
        (Architecture.LITE, None, "float32"),
        (Architecture.SWIN_L, None, "float16"),
        (Architecture.SWIN_L, torch.float32, "float32"),
    ],
)
def test_the_record_keeps_the_float_storage(
    tmp_path: Path, architecture: Architecture, floats: torch.dtype | None, named: str
) -> None:
    path = tmp_path / "birefnet.json"
    write_prepared(path, PATCH, architecture, 1024, floats)
    assert json.loads(path.read_text())["floats"] == named
    prepared = read_prepared(path)
    assert prepared.architecture is architecture and prepared.stored == (floats or architecture.stored)


def test_a_record_without_the_float_storage_is_its_configurations_and_an_unknown_one_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "birefnet.json"
    path.write_text(json.dumps({"patch_order": "channel-major", "architecture": "swin-l", "input_side": 2048}))
    assert read_prepared(path).stored == torch.float16
    path.write_text(json.dumps({"patch_order": "patch-major", "floats": "bfloat16"}))
    with pytest.raises(ValueError, match="records floats this network does not read"):
        read_prepared(path)
