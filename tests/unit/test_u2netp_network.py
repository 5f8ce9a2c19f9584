"""u2netp: the torch network's shapes, and the converter on the real published graph and on edited
copies of it (each edit either must not change the result, or must be refused naming the node)."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from craftai_models.u2netp import OUTPUT_NAMES, U2NetP
from craftai_prepare.converters import ConversionError
from craftai_prepare.converters import u2netp as converter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    (node,) = (n for n in model.graph.node if n.name == name)
    return node


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    (tensor,) = (t for t in model.graph.initializer if t.name == name)
    return tensor


# -- the network ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(32, 32), (33, 47)])
def test_seven_maps_at_the_input_size(size: tuple[int, int]) -> None:
    """Seven [N, 1, H, W] maps in [0, 1]; an odd size works (ceil-mode pooling, resize to the skip's size)."""
    torch.manual_seed(0)
    net = U2NetP().eval()
    with torch.inference_mode():
        outputs = net(torch.randn(2, 3, *size))  # small: the shapes are the point, not the cost
    assert len(outputs) == len(OUTPUT_NAMES) == 7
    for out in outputs:
        assert out.shape == (2, 1, *size)
        assert out.dtype == torch.float32
        assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_parameter_count_is_the_papers_portable_model(u2netp_published: onnx.ModelProto) -> None:
    """1.13 M parameters (paper, table 2), exactly as many as the published graph stores."""
    count = sum(p.numel() for p in U2NetP().parameters())
    assert count == 1_125_485
    assert count == sum(int(np.prod(t.dims)) for t in u2netp_published.graph.initializer)


# -- the published graph and its conversion ----------------------------------------------------------


def test_published_graph_has_batchnorm_folded(u2netp_published: onnx.ModelProto) -> None:
    """What the converter was written against: every conv has a bias and no BN node is left."""
    ops = Counter(n.op_type for n in u2netp_published.graph.node)
    assert ops["BatchNormalization"] == 0
    assert {k: ops[k] for k in ("Conv", "Relu", "MaxPool", "Resize", "Add", "Sigmoid")} == {
        "Conv": 119,
        "Relu": 112,
        "MaxPool": 33,
        "Resize": 38,
        "Add": 11,
        "Sigmoid": 7,
    }
    assert all(len(n.input) == 3 for n in u2netp_published.graph.node if n.op_type == "Conv")


def test_converted_state_dict_loads_strict(u2netp_converted: dict[str, torch.Tensor]) -> None:
    net = U2NetP()
    assert set(u2netp_converted) == set(net.state_dict())
    net.load_state_dict(u2netp_converted, strict=True)
    assert all(t.dtype == torch.float32 for t in u2netp_converted.values())
    # No two entries share storage (safetensors refuses shared tensors).
    assert len({t.untyped_storage().data_ptr() for t in u2netp_converted.values()}) == len(u2netp_converted)
    # Named initializers the exporter kept must land where their names say.
    assert u2netp_converted["side_3.weight"].shape == (1, 64, 3, 3)
    assert u2netp_converted["fuse.weight"].shape == (1, 6, 1, 1)


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for key, value in a.items():
        assert torch.equal(value, b[key]), key


def test_initializer_names_do_not_matter(
    u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor]
) -> None:
    """Renaming every initializer (side1.weight -> w0, ...) gives the same state_dict."""
    model = copy.deepcopy(u2netp_published)
    names = {t.name: f"w{i}" for i, t in enumerate(model.graph.initializer)}
    for t in model.graph.initializer:
        t.name = names[t.name]
    for node in model.graph.node:
        node.input[:] = [names.get(i, i) for i in node.input]
    _same(converter.convert(model), u2netp_converted)


def test_node_order_does_not_matter(
    u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor]
) -> None:
    model = copy.deepcopy(u2netp_published)
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _same(converter.convert(model), u2netp_converted)


def test_transposed_and_shared_weights_are_followed(
    u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor]
) -> None:
    """A weight stored transposed behind a Transpose node, and one initializer feeding two convs."""
    model = copy.deepcopy(u2netp_published)
    first = _node(model, "Conv_0")
    stored = _initializer(model, first.input[1])
    stored.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(stored).transpose(1, 0, 2, 3), stored.name))
    model.graph.node.insert(0, helper.make_node("Transpose", [stored.name], ["w_t"], perm=[1, 0, 2, 3]))
    first.input[1] = "w_t"
    for node in model.graph.node:  # side 3 now reads side 2's weights
        node.input[:] = ["side2.weight" if i == "side3.weight" else i for i in node.input]
    result = converter.convert(model)
    assert torch.equal(result["en_1.conv_in.conv.weight"], u2netp_converted["en_1.conv_in.conv.weight"])
    assert torch.equal(result["side_3.weight"], u2netp_converted["side_2.weight"])
    assert result["side_3.weight"].untyped_storage().data_ptr() != result["side_2.weight"].untyped_storage().data_ptr()


def _side_resizes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The Resize nodes of the side outputs (each fed by its side conv; every side goes to 320²)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    return [n for n in model.graph.node if n.op_type == "Resize" and producers[n.input[0]].op_type == "Conv"]


def _fixed_size(model: onnx.ModelProto, sizes: list[int]) -> None:
    """The first side resize's size folded into one stored constant, as onnxsim folds a fixed-size
    export (the computation it replaces dropped, as nothing reads it then)."""
    node = _side_resizes(model)[0]
    model.graph.initializer.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), f"size_{len(sizes)}"))
    node.input[3] = f"size_{len(sizes)}"

    while True:
        read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
        dead = [n for n in model.graph.node if not set(n.output) & read]
        if not dead:
            return
        for n in dead:
            model.graph.node.remove(n)


def test_a_fixed_resize_size_is_followed_where_it_is_the_skip_tensors(
    u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor]
) -> None:
    model = copy.deepcopy(u2netp_published)
    _fixed_size(model, [1, 1, 320, 320])
    _same(converter.convert(model), u2netp_converted)
    wrong = copy.deepcopy(u2netp_published)
    _fixed_size(wrong, [1, 1, 320, 319])
    with pytest.raises(ConversionError, match=r"sizes \[1, 1, 320, 319\] at the graph's input size"):
        converter.convert(wrong)


# -- refusals -----------------------------------------------------------------------------------------


def _drop_first_relu(model: onnx.ModelProto) -> None:
    relu = _node(model, "Relu_1")
    model.graph.node.remove(relu)


def _reshape_a_weight(model: onnx.ModelProto) -> None:
    tensor = _initializer(model, _node(model, "Conv_0").input[1])
    tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).reshape(32, 6, 3, 3), tensor.name))


def _undilate_a_conv(model: onnx.ModelProto) -> None:
    node = _node(model, "Conv_19")  # En_1's bottom conv, dilation 2
    for attr in node.attribute:
        if attr.name in ("dilations", "pads"):
            attr.ints[:] = [1] * len(attr.ints)


def _nearest_resize(model: onnx.ModelProto) -> None:
    node = next(n for n in model.graph.node if n.op_type == "Resize")
    for attr in node.attribute:
        if attr.name == "mode":
            attr.s = b"nearest"


def _extra_node(model: onnx.ModelProto) -> None:
    model.graph.node.append(helper.make_node("Neg", ["801"], ["stray"], name="Stray_Neg"))


def _swap_outputs(model: onnx.ModelProto) -> None:
    first, second = copy.deepcopy(model.graph.output[0]), copy.deepcopy(model.graph.output[1])
    model.graph.output[0].CopyFrom(second)
    model.graph.output[1].CopyFrom(first)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_drop_first_relu, "'1966' (from node 'Conv_0' (Conv)) should feed exactly one Relu node"),
        (
            _reshape_a_weight,
            "node 'Conv_0' (Conv) (en_1.conv_in.conv.weight): shape (32, 6, 3, 3), where u2netp has (64, 3, 3, 3)",
        ),
        (_undilate_a_conv, "node 'Conv_19' (Conv) (en_1.bottom.conv): dilations [1, 1] (u2netp: [2, 2])"),
        (
            _nearest_resize,
            "node 'Resize_42' (Resize): u2netp resizes bilinearly with half-pixel centres and no "
            "antialias; got coordinate_transformation_mode=pytorch_half_pixel, cubic_coeff_a=-0.75, "
            "mode=nearest",
        ),
        (_extra_node, "1 node(s) are not part of u2netp: node 'Stray_Neg' (Neg)"),
        (_swap_outputs, "the graph's outputs are ['1960', '1959',"),
    ],
    ids=["node-removed", "initializer-reshaped", "dilation-changed", "resize-mode", "stray-node", "outputs-swapped"],
)
def test_converter_refuses_another_graph(
    u2netp_published: onnx.ModelProto, edit: Callable[[onnx.ModelProto], None], message: str
) -> None:
    model = copy.deepcopy(u2netp_published)
    edit(model)
    with pytest.raises(ConversionError) as refused:
        converter.convert(model)
    assert message in str(refused.value)


def test_check_refuses_a_difference_above_the_tolerance() -> None:
    fine = converter.OutputDifference("fused", converter.FUSED_MAX_ABS_TOLERANCE, 0.0)
    converter.check([fine])
    for value in (2 * converter.FUSED_MAX_ABS_TOLERANCE, float("nan")):
        with pytest.raises(ConversionError, match="differs from the source graph"):
            converter.check([converter.OutputDifference("fused", value, 0.0)])
    with pytest.raises(ConversionError, match="side_2"):
        converter.check([converter.OutputDifference("side_2", 2 * converter.SIDE_MAX_ABS_TOLERANCE, 0.0)])


def test_probe_is_fixed() -> None:
    """The probe is closed-form: same values on every machine, and a batch repeats the one picture."""
    probe = converter.probe_input(2)
    assert probe.shape == (2, 3, 320, 320) and probe.dtype == np.float32
    assert np.array_equal(probe[0], probe[1])
    assert np.array_equal(probe, converter.probe_input(2))
