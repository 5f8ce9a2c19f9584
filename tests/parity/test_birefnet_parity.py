"""BiRefNet_lite: this project's network against nobg 0.3.1's, stage by stage, on the CPU.

Both read the same file: the calibrated random checkpoint in the original key layout
(craftai_dev.birefnet_fixture), nobg through its own `from_origin` (which remaps the layout
and loads with strict=False: the first test proves every tensor was used), ours through the
service's strict loader. nobg's deformable convolution is torchvision's, which does not import
beside the CPU torch here: it is stood in for by craftai_dev.deform_conv_reference (the DCNv2
formula, one picture and one tap at a time); tests/gpu compares with torchvision's own.

Input: a real photo squashed to 512² — the smallest size at which nobg's backbone is the original
Swin: transformers' Swin shrinks its window to the feature map when the map is not larger than the
window (7), which the original never does; at 512² the smallest map (the half-size pass's last
stage) is 8×8. The patch order is nobg's (einops, channel-major); the trained order differs from it
only by a reordering of the injection blocks' inputs (tests/unit/test_birefnet_network.py), and is
compared with nobg running the original split on the GPU machine (tests/gpu).

Tolerance: max |ours − nobg| <= 2e-4 × max |nobg| for every compared tensor, fp32 (measured:
about 1e-6 in the backbone, up to ~1e-5 at the logits).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import Checkpoint, checkpoints, photo_input
from craftai_models.birefnet import BiRefNet, PatchOrder, Stages, load_birefnet
from craftai_models.swin import relative_position_index

pytestmark = pytest.mark.slow

SIDE = 512
RTOL = 2e-4


@dataclass
class Pair:
    checkpoint: Checkpoint
    file: dict[str, Tensor]
    reference: Any  # nobg's BiRefNet (untyped)
    ours: BiRefNet
    x: Tensor
    ours_stages: Stages
    ref_stages: dict[str, Any]


def reference_stages(reference: Any, x: Tensor) -> dict[str, Any]:
    """One nobg forward: backbone (both passes), squeeze, decoder blocks, gates (hooks), outputs."""
    captured: dict[str, Any] = {"bb": [], "blocks": {}, "gates": {}}
    decoder: Any = reference.decoder
    handles = [
        reference.bb.register_forward_hook(lambda _m, _i, out: captured["bb"].append(list(out.feature_maps))),
        reference.squeeze_module.register_forward_hook(lambda _m, _i, out: captured.__setitem__("squeeze", out)),
    ]
    for i, block in enumerate(decoder.decoder_blocks):
        handles.append(block.register_forward_hook(lambda _m, _i, out, i=i: captured["blocks"].__setitem__(i, out)))
    for i, gate in enumerate(decoder.gdt_convs_attn):
        handles.append(gate.register_forward_hook(lambda _m, _i, out, i=i: captured["gates"].__setitem__(i, out)))
    try:
        with torch.no_grad():
            out = reference(x)
    finally:
        for handle in handles:
            handle.remove()
    captured["logits"] = out["logits"]
    captured["side"] = list(out["intermediate_logits"])
    return captured


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    checkpoint = checkpoints()["random"]
    origin = tmp_path_factory.mktemp("nobg-origin")
    (origin / "model.safetensors").symlink_to(checkpoint.path)
    reference = birefnet_reference.reference_from_origin(origin)
    ours = load_birefnet(checkpoint.path, order=PatchOrder.CHANNEL_MAJOR, pin=checkpoint.pin)
    x = photo_input(SIDE)
    with torch.inference_mode():
        ours_stages = ours.stages(x)
    ref_stages = reference_stages(reference, x)
    yield Pair(checkpoint, load_file(str(checkpoint.path)), reference, ours, x, ours_stages, ref_stages)


def relative_error(ours: Tensor, reference: Tensor) -> float:
    assert ours.shape == reference.shape, (ours.shape, reference.shape)
    assert torch.isfinite(reference).all()
    return float((ours - reference).abs().max() / reference.abs().max().clamp_min(1e-12))


def test_nobg_uses_every_tensor_of_the_file(pair: Pair) -> None:
    """nobg's from_origin loads with strict=False, skipping what does not fit: here every tensor of
    the file lands in its network, and every tensor of its network came from the file but the two
    of transformers' final LayerNorm, which SwinBackbone computes and then discards (shown by
    poisoning it: the feature maps do not change)."""
    remapped = birefnet_reference.remap(pair.file)
    target = pair.reference.state_dict()
    assert not set(remapped) - set(target)
    for key, value in remapped.items():
        assert torch.equal(target[key], value), key
    assert set(target) - set(remapped) == {"bb.swin.layernorm.weight", "bb.swin.layernorm.bias"}
    layernorm: Any = pair.reference.bb.swin.layernorm
    saved = layernorm.weight.detach().clone()
    try:
        with torch.no_grad():
            layernorm.weight.fill_(float("nan"))
            poisoned = list(pair.reference.bb(pair.x).feature_maps)
    finally:
        with torch.no_grad():
            layernorm.weight.copy_(saved)
    assert all(torch.equal(a, b) for a, b in zip(poisoned, pair.ref_stages["bb"][0], strict=True))
    # What nobg does not read it rebuilds: the relative position indices; the file's are the standard ones.
    dropped = {k for k, v in pair.file.items() if not birefnet_reference.remap({k: v})}
    assert dropped and all(k.endswith("attn.relative_position_index") for k in dropped)
    assert all(torch.equal(pair.file[k], relative_position_index(7)) for k in dropped)
    assert len(pair.file) == 586


def test_every_stage_matches_nobg(pair: Pair) -> None:
    ref, ours = pair.ref_stages, pair.ours_stages
    errors: dict[str, float] = {}
    full, half = ref["bb"]
    for i in range(4):
        errors[f"backbone[{i}]"] = relative_error(ours.backbone[i], full[i])
        errors[f"backbone half[{i}]"] = relative_error(ours.backbone_half[i], half[i])
    errors["squeeze"] = relative_error(ours.squeeze, ref["squeeze"])
    for i in range(4):
        errors[f"decoder block {4 - i}"] = relative_error(ours.decoder.blocks[i], ref["blocks"][i])
    for i in range(3):
        errors[f"gate {4 - i} logits"] = relative_error(ours.decoder.gates[i], ref["gates"][i])
        errors[f"side logits {4 - i}"] = relative_error(ours.decoder.side[i], ref["side"][i])
    errors["logits"] = relative_error(ours.decoder.logits, ref["logits"])
    print("\n".join(f"{k:22s} {v:.2e}" for k, v in errors.items()))
    assert {k: v for k, v in errors.items() if v > RTOL} == {}


def test_the_comparison_is_not_degenerate(pair: Pair) -> None:
    """The calibrated fixture's matte varies across the photo: a share of subject, a share of
    background, and a spread of values in between."""
    matte = torch.sigmoid(pair.ref_stages["logits"])
    assert 0.1 < float((matte > 0.5).float().mean()) < 0.9
    assert float(matte.std()) > 0.1
    for gate in pair.ref_stages["gates"].values():
        assert 0.05 < float(torch.sigmoid(gate).mean()) < 0.95


def test_the_fixture_is_the_published_layout(pair: Pair) -> None:
    """The fixture file is what our strict loader expects, as the published file is (its size is
    checked against the pin in tests/unit); read as downloaded, no conversion."""
    assert pair.checkpoint.path.stat().st_size == pair.checkpoint.pin.size
    assert set(pair.file) == set(pair.ours.state_dict())
    assert all(torch.equal(pair.ours.state_dict()[k], v) for k, v in pair.file.items())
