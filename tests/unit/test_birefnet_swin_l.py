"""The Swin-L BiRefNet (general, portrait, DIS, HRSOD, COD, massive, HR, dynamic) is this project's
BiRefNet at Swin-L's widths: the evidence that it is the published network, and its loader.

- Stored as the published Swin-L files store it (floats in fp16, the relative position indices
  and BatchNorm counters in int64, `{"format": "pt"}`), its tensors make a file of exactly the
  size of BiRefNet_dynamic's and BiRefNet_HR's `model.safetensors` (444,473,596 bytes): every
  name's length, every shape and every dtype enter that count.
- Renamed by nobg's own remapping of the original layout, its tensors are nobg's Swin-L
  BiRefNet's, name for name and shape for shape (nobg also has the final LayerNorm that
  transformers' SwinBackbone computes and discards, as for the lite model).
- The loader reads such a file strictly and computes in fp32; a file stored otherwise is refused
  in words that name what differs.
The network's outputs against nobg's at Swin-L: tests/gpu/test_birefnet_cuda.py."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from craftai_dev import birefnet_reference
from craftai_dev.birefnet_fixture import METADATA, randomised_state_dict
from craftai_models.birefnet import Architecture, PatchOrder, birefnet_swin_l, load_birefnet
from craftai_models.checkpoints import CheckpointRefusedError, expected_tensors

# model.safetensors of ZhengPeng7/BiRefNet_dynamic and of ZhengPeng7/BiRefNet_HR (docs/research/weights.md)
PUBLISHED_SIZE = 444_473_596
PUBLISHED_FP32_SIZE = 884_878_856  # the same layout with its floats in fp32 (birefnet-portrait's file)


def _meta_network() -> torch.nn.Module:
    with torch.device("meta"):
        return birefnet_swin_l()


def test_the_network_has_the_published_parameters_and_stored_dtypes() -> None:
    # the file's size from these tensors: the next test writes one as published
    expected = expected_tensors(_meta_network(), floats=torch.float16)
    assert {dt for _, dt in expected.values()} == {"F16", "I64"} and len(expected) == 754
    assert sum(1 for _, dt in expected.values() if dt == "F16") == 687
    parameters = sum(p.numel() for p in _meta_network().parameters())
    assert parameters == 220_176_498  # "220M" on the model cards


def test_the_network_is_nobgs_swin_l_tensor_for_tensor() -> None:
    ours = _meta_network().state_dict()
    module = birefnet_reference.modeling()
    config = module.BiRefNetConfig()  # nobg's default: the Swin-L BiRefNet
    assert (config.embed_dim, config.depths, config.num_heads, config.window_size) == (
        192,
        [2, 2, 18, 2],
        [6, 12, 24, 48],
        12,
    )
    with torch.device("meta"):
        theirs = module.BiRefNet(config).state_dict()
    renamed = birefnet_reference.remap(dict(ours))
    assert set(theirs) - set(renamed) == {"bb.swin.layernorm.weight", "bb.swin.layernorm.bias"}
    assert not set(renamed) - set(theirs)
    assert {k: tuple(v.shape) for k, v in renamed.items()} == {k: tuple(theirs[k].shape) for k in renamed}
    dropped = {k for k in ours if not birefnet_reference.remap({k: ours[k]})}  # what nobg rebuilds
    assert dropped and all(k.endswith("attn.relative_position_index") for k in dropped)


@pytest.mark.slow
def test_a_published_swin_l_file_loads_strictly_and_computes_in_fp32(tmp_path: Path) -> None:
    state = randomised_state_dict(_meta_network(), seed=5)
    published = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    save_file(published, str(tmp_path / "model.safetensors"), metadata=METADATA)
    # every name's length, every shape and every dtype enter the size: the published files' exactly
    assert (tmp_path / "model.safetensors").stat().st_size == PUBLISHED_SIZE
    model = load_birefnet(
        tmp_path / "model.safetensors", order=PatchOrder.CHANNEL_MAJOR, architecture=Architecture.SWIN_L
    )
    loaded = model.state_dict()
    for key in (
        "bb.layers.2.blocks.17.attn.qkv.weight",
        "decoder.conv_out1.0.weight",
        "squeeze_module.0.bn_in.running_var",
    ):
        assert loaded[key].dtype == torch.float32 and torch.equal(loaded[key], published[key].float()), key
    assert torch.equal(
        loaded["bb.layers.0.blocks.0.attn.relative_position_index"],
        state["bb.layers.0.blocks.0.attn.relative_position_index"],
    )
    del model, loaded
    # the fp32 storage (birefnet-portrait's file): refused unless the recipe says so, then read as it is
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "fp32.safetensors"), metadata=METADATA)
    assert (tmp_path / "fp32.safetensors").stat().st_size == PUBLISHED_FP32_SIZE
    with pytest.raises(CheckpointRefusedError, match=r"wrong shape or type: .* is F32\[.*\], expected F16"):
        load_birefnet(tmp_path / "fp32.safetensors", architecture=Architecture.SWIN_L)
    model = load_birefnet(tmp_path / "fp32.safetensors", architecture=Architecture.SWIN_L, floats=torch.float32)
    key = "bb.layers.2.blocks.17.attn.qkv.weight"
    assert torch.equal(model.state_dict()[key], state[key])


def test_the_references_leave_a_real_torchvision_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """nobg's import sets other references' torchvision stand-ins (no spec) aside and puts them back;
    a real torchvision (a spec) stays the same module objects throughout: imported a second time it
    would register its operators again, which torch refuses (the GPU machine has one)."""
    real = types.ModuleType("torchvision")
    real.__spec__ = importlib.machinery.ModuleSpec("torchvision", None)
    stand_in = types.ModuleType("torchvision.ops")  # another reference's, no spec
    for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, key)  # other tests' stand-ins, put back after this one
    monkeypatch.setitem(sys.modules, "torchvision", real)
    monkeypatch.setitem(sys.modules, "torchvision.ops", stand_in)
    with birefnet_reference._torchvision_set_aside(stand_ins_only=True):
        assert sys.modules["torchvision"] is real and "torchvision.ops" not in sys.modules
        sys.modules["torchvision.io"] = types.ModuleType("torchvision.io")  # imported by the body
    assert sys.modules["torchvision"] is real and sys.modules["torchvision.ops"] is stand_in
    assert "torchvision.io" not in sys.modules
    monkeypatch.delitem(sys.modules, "torchvision.ops")
    with birefnet_reference._torchvision_set_aside(stand_ins_only=True):  # nothing to set aside
        sys.modules["torchvision.ops"] = ops = types.ModuleType("torchvision.ops")
    assert sys.modules["torchvision"] is real and sys.modules["torchvision.ops"] is ops  # a real import stays
