"""The U²-Net family's onnxruntime route loads a graph only of the rembg files' contract (one
[1, 3, 320, 320] picture in, the [1, 1, 320, 320] fused map first out) and refuses another in words,
on real graphs run by onnxruntime; the IS-Net routes the same at 1024², their working memory on the
CPU counted before a picture runs."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from craftai_dev.files import u2netp_onnx
from craftai_infer.routes import ModelRefusedError, RouteFiles
from craftai_infer.routes.isnet_onnx import NETWORK_BYTES, IsnetAnimeOnnx, IsnetOnnx
from craftai_infer.routes.u2netp_onnx import U2netpOnnx


def _graph(path: Path, input_shape: list[int | str], mean_channels: bool) -> Path:
    """A picture in; its sigmoid out, over the channels' mean when `mean_channels`."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"])]
    out_shape = list(input_shape)
    last = "s"
    if mean_channels:
        nodes.append(helper.make_node("ReduceMean", ["s"], ["m"], axes=[1], keepdims=1))
        out_shape[1] = 1
        last = "m"
    graph = helper.make_graph(
        nodes,
        "stand-in",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, out_shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _load(path: Path, route: type[U2netpOnnx] = U2netpOnnx) -> U2netpOnnx:
    return route(RouteFiles(by_role={"network": path}, prepared=None, cpu_threads=1), "cpu")


def test_the_published_u2netp_and_a_graph_of_its_contract_load(tmp_path: Path) -> None:
    assert _load(u2netp_onnx()).input_name == "input.1"
    assert _load(_graph(tmp_path / "named.onnx", ["batch", 3, 320, 320], mean_channels=True)).input_name == "x"


@pytest.mark.parametrize(
    ("shape", "mean_channels", "words"),
    [
        ([1, 3, 256, 256], True, "not one [1, 3, 320, 320] picture"),
        ([1, 3, 320, 320], False, "the graph's first output is [1, 3, 320, 320], not the [1, 1, 320, 320] fused map"),
    ],
)
def test_a_graph_of_another_contract_is_refused_in_words(
    tmp_path: Path, shape: list[int | str], mean_channels: bool, words: str
) -> None:
    with pytest.raises(ModelRefusedError, match=words.replace("[", r"\[").replace("]", r"\]")):
        _load(_graph(tmp_path / "other.onnx", shape, mean_channels))


@pytest.mark.parametrize("route", [IsnetOnnx, IsnetAnimeOnnx])
def test_the_isnet_routes_take_a_1024_graph_and_refuse_u2netps(tmp_path: Path, route: type[U2netpOnnx]) -> None:
    loaded = _load(_graph(tmp_path / "isnet.onnx", [1, 3, 1024, 1024], mean_channels=True), route)
    assert loaded.capabilities.concurrent_runs == 1
    assert loaded.working_bytes(3000, 4000) > NETWORK_BYTES  # the same for any picture: it runs at 1024²
    with pytest.raises(ModelRefusedError, match=r"not one \[1, 3, 1024, 1024\] picture"):
        _load(u2netp_onnx(), route)
