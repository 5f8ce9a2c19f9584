"""The SAM 2.1 converter on the random-weight fixture (craftai_dev.sam21).

The fixture is Meta's network with every tensor randomised, exported to the samexporter contract
with the legacy exporter, plus the random state_dict it was exported from. The converter must give
back exactly that state_dict (every tensor the graphs still contain), the converted network must
agree with onnxruntime on the probe, and a graph that is not this network must be refused in
words that name the node.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from craftai_models.sam2.model import state_dict_from_meta
from craftai_prepare.converters import sam21

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "fixtures"
# Before the fixture generator is merged into this branch, point this at a checkout that has it.
GENERATOR_ENV = "CRAFTAI_SAM21_FIXTURE_GENERATOR"


def _fixture_folder() -> Path:
    try:
        generator = importlib.import_module("craftai_dev.sam21")
    except ModuleNotFoundError:
        script = os.environ.get(GENERATOR_ENV)
        if not script:
            pytest.skip(f"craftai_dev.sam21 is not in this checkout and {GENERATOR_ENV} is not set")
        done = subprocess.run(
            [sys.executable, script, "--cache-dir", str(CACHE), "--json"], check=True, capture_output=True, text=True
        )
        return Path(json.loads(done.stdout)["folder"])
    return Path(generator.ensure_fixture(CACHE).folder)


@pytest.fixture(scope="module")
def folder() -> Path:
    return _fixture_folder()


@pytest.fixture(scope="module")
def encoder_proto(folder: Path) -> onnx.ModelProto:
    return sam21.load_onnx(folder / "encoder.onnx")


@pytest.fixture(scope="module")
def decoder_proto(folder: Path) -> onnx.ModelProto:
    return sam21.load_onnx(folder / "decoder.onnx")


@pytest.fixture(scope="module")
def converted(encoder_proto: onnx.ModelProto, decoder_proto: onnx.ModelProto) -> dict[str, torch.Tensor]:
    return sam21.convert(encoder_proto, decoder_proto)


def test_converted_weights_are_the_fixture_weights(folder: Path, converted: dict[str, torch.Tensor]) -> None:
    """Tensor for tensor: the state_dict the fixture was randomised with, in this network's names."""
    from safetensors.torch import load_file

    meta = load_file(str(folder / "weights.safetensors"))
    expected = state_dict_from_meta(meta)
    assert set(converted) == set(expected)
    for key, value in expected.items():
        assert converted[key].dtype == torch.float32
        assert torch.equal(converted[key], value), key
    # What the published graphs cannot give back: the video/memory parts and the object-score head.
    image_path = [k for k in meta if k.startswith(("image_encoder.", "sam_prompt_encoder.", "sam_mask_decoder."))]
    head = [k for k in image_path if k.startswith("sam_mask_decoder.pred_obj_score_head.")]
    assert len(head) == 6
    assert len(image_path) + 1 == len(expected) + len(head)  # + no_mem_embed


def test_the_decoder_graph_carries_the_single_mask_token(
    folder: Path, decoder_proto: onnx.ModelProto, converted: dict[str, torch.Tensor]
) -> None:
    """The graph answers the three multimask tokens only, but, exported like samexporter's (all four
    mask tokens computed, then sliced), it still holds token 0's embedding, its hypernetwork MLP and
    its row of the IoU head; the converter gives them back exactly (Meta's single-mask answer)."""
    from safetensors.torch import load_file

    outputs = {
        o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in decoder_proto.graph.output
    }
    assert outputs["iou_predictions"][-1] == 3  # the single-mask token is not an output
    meta = load_file(str(folder / "weights.safetensors"))
    for layer in range(3):
        for part in ("weight", "bias"):
            key = f"output_hypernetworks_mlps.0.layers.{layer}.{part}"
            assert torch.equal(converted[f"mask_decoder.{key}"], meta[f"sam_mask_decoder.{key}"]), key
    assert torch.equal(converted["mask_decoder.mask_tokens.weight"][0], meta["sam_mask_decoder.mask_tokens.weight"][0])
    head = "iou_prediction_head.layers.2"
    assert converted[f"mask_decoder.{head}.weight"].shape[0] == 4  # a row for every token, token 0's included
    assert torch.equal(converted[f"mask_decoder.{head}.weight"], meta[f"sam_mask_decoder.{head}.weight"])


@pytest.mark.slow
def test_probe_agrees_with_onnxruntime(folder: Path, converted: dict[str, torch.Tensor]) -> None:
    report = sam21.verify_conversion(converted, folder / "encoder.onnx", folder / "decoder.onnx")
    assert report.ok, report.failures()
    assert report.logits_max_abs <= sam21.PROBE_LOGIT_ATOL
    assert report.mask_iou_min >= sam21.PROBE_MASK_IOU_MIN
    assert report.iou_pred_max_abs <= sam21.PROBE_IOU_PRED_ATOL
    assert len(report.prompts) == len(sam21.PROBE_PROMPTS)


def test_tolerates_shared_initializers(decoder_proto: onnx.ModelProto) -> None:
    """An exporter merges equal tensors into one initializer (with default init, every LayerNorm
    weight is ones): two nodes then read the same name, and both parameters get its value."""
    model = copy.deepcopy(decoder_proto)
    norms = [n for n in model.graph.node if n.op_type == "LayerNormalization"][:2]
    kept, dropped = norms[0].input[1], norms[1].input[1]
    norms[1].input[1] = kept
    model.graph.initializer.remove(_initializer(model, dropped))
    shared = torch.from_numpy(numpy_helper.to_array(_initializer(model, kept)).copy())
    state = sam21.convert_decoder(model)
    assert torch.equal(state["mask_decoder.transformer.layers.0.norm1.weight"], shared)
    assert torch.equal(state["mask_decoder.transformer.layers.0.norm2.weight"], shared)


# ------------------------------------------------------------------------------------------------
# refusals: a graph that is not this network gets a plain message naming the node


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def _set_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    _initializer(model, name).CopyFrom(numpy_helper.from_array(value, name))


def _equal_with_constant(model: onnx.ModelProto, k: float) -> onnx.NodeProto:
    """The Equal node comparing the point labels with the constant k."""
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"
    }
    for node in model.graph.node:
        if node.op_type == "Equal" and any(
            x in constants and constants[x].size == 1 and float(constants[x]) == k for x in node.input
        ):
            return node
    raise AssertionError(f"no Equal with {k}")


def test_refuses_renamed_inputs(decoder_proto: onnx.ModelProto) -> None:
    model = copy.deepcopy(decoder_proto)
    model.graph.input[0].name = "image_embeddings"
    with pytest.raises(sam21.GraphMismatchError, match=r"decoder\.onnx is not .* inputs \['image_embeddings'"):
        sam21.convert_decoder(model)


def test_refuses_a_wrong_token_count(decoder_proto: onnx.ModelProto) -> None:
    model = copy.deepcopy(decoder_proto)
    expand = next(n for n in model.graph.node if n.op_type == "Expand" and n.input[0].startswith("onnx::"))
    tokens = numpy_helper.to_array(_initializer(model, expand.input[0]))
    _set_initializer(model, expand.input[0], tokens[:, :5].copy())
    message = rf"at node '{re.escape(expand.name)}'.*output tokens should be \[1, 6, C\]"
    with pytest.raises(sam21.GraphMismatchError, match=message):
        sam21.convert_decoder(model)


def test_refuses_an_unknown_point_label(decoder_proto: onnx.ModelProto) -> None:
    model = copy.deepcopy(decoder_proto)
    equal = _equal_with_constant(model, 3.0)
    constant = next(n for n in model.graph.node if n.op_type == "Constant" and n.output[0] in equal.input)
    constant.attribute[0].t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(constant.attribute[0].t) + 1))
    with pytest.raises(sam21.GraphMismatchError, match=r"embedding for point label 4"):
        sam21.convert_decoder(model)


def test_refuses_a_layer_of_another_width(decoder_proto: onnx.ModelProto) -> None:
    """A transposed Linear weight of the wrong shape: the message names the MatMul and both shapes."""
    model = copy.deepcopy(decoder_proto)
    matmul = next(n for n in model.graph.node if n.op_type == "MatMul" and "mlp/layers.0" in n.name)
    weight = numpy_helper.to_array(_initializer(model, matmul.input[1]))
    _set_initializer(model, matmul.input[1], weight[:, :1024].copy())
    message = rf"at node '{re.escape(matmul.name)}'.*should be \[2048, 256\].*\[1024, 256\]"
    with pytest.raises(sam21.GraphMismatchError, match=message):
        sam21.convert_decoder(model)


def test_refuses_another_layer_norm_epsilon(decoder_proto: onnx.ModelProto) -> None:
    model = copy.deepcopy(decoder_proto)
    norm = next(n for n in model.graph.node if n.op_type == "LayerNormalization")
    next(a for a in norm.attribute if a.name == "epsilon").f = 1e-3
    with pytest.raises(sam21.GraphMismatchError, match=rf"at node '{re.escape(norm.name)}'.*eps"):
        sam21.convert_decoder(model)


def test_refuses_another_patch_embedding_stride(encoder_proto: onnx.ModelProto) -> None:
    conv = next(n for n in encoder_proto.graph.node if n.op_type == "Conv")
    strides = next(a for a in conv.attribute if a.name == "strides")
    saved = list(strides.ints)
    strides.ints[:] = [8, 8]
    try:
        message = rf"encoder\.onnx is not .* at node '{re.escape(conv.name)}'.*stride"
        with pytest.raises(sam21.GraphMismatchError, match=message):
            sam21.convert_encoder(encoder_proto)
    finally:
        strides.ints[:] = saved
