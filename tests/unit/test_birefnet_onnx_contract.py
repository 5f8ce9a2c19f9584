"""BiRefNet's onnxruntime routes (birefnet-lite, birefnet-hr) read the network's side from the graph and
take its first output as the matte's logits: a graph whose input is not one square picture, or whose
first output is not (1, 1, S, S) at that side, is refused when the route loads it (MODEL_REFUSED in
the service), on real onnxruntime sessions of small graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from craftai_infer.routes import ModelRefusedError, RouteFiles
from craftai_infer.routes.birefnet_onnx import BirefnetHrOnnx


def _graph(path: Path, side: int, out_channels: int, stride: int = 1) -> Path:
    """One 1x1 convolution: `out_channels` maps of the input's side divided by `stride`."""
    weight = numpy_helper.from_array(np.full((out_channels, 3, 1, 1), 0.1, np.float32), "w")
    declared = side // stride
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input_image", "w"], ["output_image"], strides=[stride, stride])],
        "contract",
        [helper.make_tensor_value_info("input_image", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("output_image", TensorProto.FLOAT, [1, out_channels, declared, declared])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _route(path: Path) -> BirefnetHrOnnx:
    return BirefnetHrOnnx(RouteFiles(by_role={"network": path}, prepared=None, cpu_threads=1), "cpu")


def test_the_side_is_read_from_the_graph(tmp_path: Path) -> None:
    assert _route(_graph(tmp_path / "ok.onnx", 64, 1)).settings.size == 64


@pytest.mark.parametrize(("channels", "stride"), [(3, 1), (1, 2)])
def test_a_first_output_that_is_not_the_logits_is_refused(tmp_path: Path, channels: int, stride: int) -> None:
    with pytest.raises(ModelRefusedError, match="not BiRefNet's logits"):
        _route(_graph(tmp_path / "other.onnx", 64, channels, stride))
