"""SAM 2.1 graphs, step 1: the parametrised operations, recognised by their pattern in node order.

Names cannot be trusted (see the package), so each operation that carries weights is found by
its shape in the graph: Conv / ConvTranspose with constant weight and bias; Gemm; MatMul with a
constant right operand whose only consumer adds a constant bias (a Linear, weight transposed
back); LayerNormalization; Mul by a [C,1,1] constant followed by Add of a [C,1,1] constant
(LayerNorm2d); Mul of a [1,C] constant by `point_labels == k` (the label-k point embedding, k
read from the Equal node); Mul of a [1,C,1,1] constant by `1 - has_mask_input` (no-mask
embedding); Expand of a [1,T,C] constant (the output tokens); Resize of a constant [1,C,h,w]
plus the tiled window table found behind its Tile (Hiera's position embedding); Add of a
[1,1,C] constant (no_mem_embed); MatMul by a constant [2,N] (the random Fourier matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from craftai_prepare.converters import ConversionError
from craftai_prepare.onnx_graph import OnnxGraph, attribute, name_of, subgraphs


class GraphMismatchError(ConversionError):
    """The ONNX file is not the SAM 2.1 tiny samexporter graph this converter knows."""


class SamGraph(OnnxGraph):
    """One file of the pair, indexed with the bodies of its If nodes (Hiera's window position
    table is only reached through an If), and named in messages by `label` ("encoder.onnx")."""

    def __init__(self, model: onnx.ModelProto, label: str) -> None:
        super().__init__(model, branches=True)
        self.label = label

    def error(self, node: onnx.NodeProto | None, message: str) -> GraphMismatchError:
        where = f" at node '{name_of(node)}'" if node is not None else ""
        return GraphMismatchError(
            f"{self.label} is not the SAM 2.1 tiny (samexporter) graph this converter knows{where}: {message}"
        )


def is_float(a: np.ndarray | None) -> bool:
    return a is not None and a.dtype.kind == "f"


@dataclass
class Op:
    """One parametrised operation recognised in the graph."""

    kind: str
    node: onnx.NodeProto
    tensors: dict[str, np.ndarray]
    sources: dict[str, str] = field(default_factory=dict)  # tensor role -> initializer/constant name
    info: dict[str, Any] = field(default_factory=dict)


def scan(g: SamGraph) -> list[Op]:
    """Every parametrised operation of the top-level graph, in node order."""
    # The partner nodes of a pattern (a Linear's bias Add, a LayerNorm2d's Add) match no pattern themselves.
    return [op for op in (_recognise(g, node) for node in g.nodes) if op is not None]


def _recognise(g: SamGraph, node: onnx.NodeProto) -> Op | None:
    t = node.op_type
    ins = list(node.input)
    consts = [g.constant(x) if x else None for x in ins]
    if t in ("Conv", "ConvTranspose") and is_float(consts[1] if len(ins) > 1 else None):
        weight = consts[1]
        bias = consts[2] if len(ins) > 2 else None
        assert weight is not None
        tensors = {"weight": weight}
        sources = {"weight": ins[1]}
        if bias is not None:
            tensors["bias"], sources["bias"] = bias, ins[2]
        kind = "conv" if t == "Conv" else "conv_transpose"
        info: dict[str, Any] = {
            "strides": list(attribute(node, "strides", [1, 1])),
            "pads": list(attribute(node, "pads", [0, 0, 0, 0])),
            "group": attribute(node, "group", 1),
        }
        return Op(kind, node, tensors, sources, info)
    if t == "Gemm" and len(ins) >= 2 and is_float(consts[1]):
        weight = consts[1]
        assert weight is not None
        if attribute(node, "alpha", 1.0) != 1.0 or attribute(node, "beta", 1.0) != 1.0 or attribute(node, "transA", 0):
            raise g.error(node, "a Gemm with alpha/beta/transA this network does not use")
        if not attribute(node, "transB", 0):
            weight = weight.T
        tensors = {"weight": weight}
        sources = {"weight": ins[1]}
        if len(ins) > 2 and consts[2] is not None:
            tensors["bias"], sources["bias"] = consts[2], ins[2]
        return Op("linear", node, tensors, sources)
    if t == "MatMul" and is_float(consts[1]) and consts[1] is not None and consts[1].ndim == 2:
        right = consts[1]
        user = g.only_consumer(node.output[0])
        if right.shape[0] == 2:  # coordinates [.., 2] @ G [2, N]: the random Fourier features
            return Op("fourier", node, {"matrix": right}, {"matrix": ins[1]}, {"grid": consts[0]})
        if user is not None and user.op_type == "Add":
            other = [x for x in user.input if x != node.output[0]]
            bias = g.constant(other[0]) if len(other) == 1 else None
            if bias is not None and bias.ndim == 1:
                return Op("linear", node, {"weight": right.T, "bias": bias}, {"weight": ins[1], "bias": other[0]})
        raise g.error(node, f"a MatMul by a constant {list(right.shape)} that is not a Linear layer")
    if t == "LayerNormalization" and len(ins) >= 3 and is_float(consts[1]) and is_float(consts[2]):
        assert consts[1] is not None and consts[2] is not None
        return Op(
            "layer_norm",
            node,
            {"weight": consts[1], "bias": consts[2]},
            {"weight": ins[1], "bias": ins[2]},
            {"eps": attribute(node, "epsilon", 1e-5), "axis": attribute(node, "axis", -1)},
        )
    if t == "Mul":
        return _recognise_mul(g, node, consts)
    if t == "Expand" and is_float(consts[0]) and consts[0] is not None and consts[0].ndim == 3:
        return Op("tokens", node, {"tokens": consts[0]}, {"tokens": ins[0]})
    if t == "Resize" and is_float(consts[0]) and consts[0] is not None and consts[0].ndim == 4:
        return _recognise_position_embedding(g, node, consts[0])
    if t == "Add":
        for i, c in enumerate(consts):
            if is_float(c) and c is not None and c.ndim == 3 and c.shape[:2] == (1, 1):
                return Op("no_mem_embed", node, {"embed": c}, {"embed": ins[i]})
    return None


def _recognise_mul(g: SamGraph, node: onnx.NodeProto, consts: list[np.ndarray | None]) -> Op | None:
    """Mul by a constant: LayerNorm2d scale, a point-label embedding, or the no-mask embedding."""
    found = [(i, c) for i, c in enumerate(consts) if is_float(c) and c is not None and c.size > 1]
    if len(found) != 1:
        return None
    i, c = found[0]
    other = node.input[1 - i]
    if c.ndim == 3 and c.shape[1:] == (1, 1):  # LayerNorm2d: weight[:, None, None] * x + bias[:, None, None]
        user = g.only_consumer(node.output[0])
        bias_name = [x for x in user.input if x != node.output[0]] if user is not None else []
        bias = g.constant(bias_name[0]) if user is not None and user.op_type == "Add" and len(bias_name) == 1 else None
        if bias is None or bias.shape != c.shape:
            raise g.error(node, f"a Mul by a {list(c.shape)} constant not followed by the LayerNorm2d bias Add")
        return Op("layer_norm_2d", node, {"weight": c, "bias": bias}, {"weight": node.input[i], "bias": bias_name[0]})
    if c.ndim == 2 and c.shape[0] == 1:  # embedding [1, C] * (point_labels == k)
        label = _equal_label(g, other)
        if label is None:
            raise g.error(node, "a [1, C] embedding multiplied by something other than `point_labels == k`")
        return Op("label_embedding", node, {"embed": c}, {"embed": node.input[i]}, {"label": label})
    if c.ndim == 4 and c.shape[0] == 1 and c.shape[2:] == (1, 1):  # (1 - has_mask_input) * no_mask_embed
        sub = g.producers.get(other)
        if sub is None or sub.op_type != "Sub" or "has_mask_input" not in sub.input:
            raise g.error(node, "a [1, C, 1, 1] embedding not weighted by `1 - has_mask_input`")
        return Op("no_mask_embed", node, {"embed": c}, {"embed": node.input[i]})
    return None


def _equal_label(g: SamGraph, name: str) -> int | None:
    """k when `name` is Cast(Equal(<from point_labels>, k)), else None."""
    node = g.producers.get(g.behind(name, ("Cast", "Identity"))[0])
    if node is None or node.op_type != "Equal":
        return None
    values = [g.constant(x) for x in node.input]
    ks = [v for v in values if v is not None and v.size == 1]
    data = [x for x, v in zip(node.input, values, strict=True) if v is None or v.size != 1]
    if len(ks) != 1 or len(data) != 1 or not derives_from(g, data[0], "point_labels", depth=8):
        return None
    k = float(ks[0].reshape(()))
    return int(k) if k == int(k) else None


def derives_from(g: SamGraph, name: str, graph_input: str, depth: int) -> bool:
    """Whether `name` is computed from `graph_input`, looking at most `depth` nodes up."""
    if name == graph_input:
        return True
    node = g.producers.get(name)
    if node is None or depth == 0:
        return False
    return any(derives_from(g, x, graph_input, depth - 1) for x in node.input if x)


def _recognise_position_embedding(g: SamGraph, node: onnx.NodeProto, background: np.ndarray) -> Op:
    """Hiera: Resize(pos_embed, bicubic) + Tile(pos_embed_window); the window table hides behind an If."""
    if attribute(node, "mode") != "cubic":
        raise g.error(node, "the position table is not resized bicubically")
    adds = [n for n in g.consumers.get(node.output[0], []) if n.op_type == "Add"]  # (Shape nodes also read it)
    if len(adds) != 1:
        raise g.error(node, "the resized position table is not added to a tiled window table")
    user = adds[0]
    tile_out = next(x for x in user.input if x != node.output[0])
    tile = g.producers.get(tile_out)
    if tile is None or tile.op_type != "Tile":
        raise g.error(user, "the resized position table is not added to a tiled window table")
    found = _constants_behind(g, tile.input[0], depth=4)
    if len({n for n, _ in found}) != 1:
        raise g.error(tile, f"expected one window table behind the Tile, found {sorted({n for n, _ in found})}")
    name, window = found[0]
    return Op(
        "position_embedding",
        node,
        {"background": background, "window": window},
        {"background": node.input[0], "window": name},
    )


def _constants_behind(g: SamGraph, name: str, depth: int) -> list[tuple[str, np.ndarray]]:
    """Float rank-4 constants that `name` is a view of (through Identity/Reshape/If branches)."""
    c = g.constant(name)
    if c is not None:
        return [(name, c)] if is_float(c) and c.ndim == 4 else []
    node = g.producers.get(name)
    if node is None or depth == 0:
        return []
    if node.op_type in ("Identity", "Reshape"):
        return _constants_behind(g, node.input[0], depth - 1)
    if node.op_type == "If":
        out: list[tuple[str, np.ndarray]] = []
        for sub in subgraphs(node):
            for o in sub.output:
                out += _constants_behind(g, o.name, depth - 1)
        return out
    return []
