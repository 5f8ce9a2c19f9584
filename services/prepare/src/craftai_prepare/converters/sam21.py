"""SAM 2.1 hiera tiny: recover the PyTorch network's weights from the published samexporter ONNX pair.

The legacy (TorchScript) exporter does not keep a state_dict: it transposes Linear weights into
anonymous `MatMul` initializers, folds LayerNorm2d parameters to [C,1,1], concatenates the decoder's
output tokens into one [1,6,256] constant, reshapes `no_mask_embed` to [1,256,1,1], merges
identical tensors into one shared initializer, and drops what the graph never uses (the
object-score head). Names therefore cannot be trusted, so this module follows the graph instead:

1. It scans the nodes in their stored (topological, i.e. trace) order and recognises each
   parametrised operation by its pattern: Conv / ConvTranspose with constant weight and bias;
   Gemm; MatMul with a constant right operand whose only consumer adds a constant bias (a Linear,
   weight transposed back); LayerNormalization; Mul by a [C,1,1] constant followed by Add of a
   [C,1,1] constant (LayerNorm2d); Mul of a [1,C] constant by `point_labels == k` (the label-k point
   embedding, k read from the Equal node); Mul of a [1,C,1,1] constant by `1 - has_mask_input`
   (no-mask embedding); Expand of a [1,T,C] constant (the output tokens); Resize of a constant
   [1,C,h,w] plus the tiled window table found behind its Tile (Hiera's position embedding); Add
   of a [1,1,C] constant (no_mem_embed); MatMul by a constant [2,N] (the random Fourier matrix).
2. It matches that sequence one to one against the order in which the network runs its layers
   (`_encoder_layout`, `_decoder_layout`) for the layers, and by kind and count for the other
   patterns (which an exporter may write anywhere), checking every shape against the network, conv
   strides/padding, LayerNorm epsilons, and, where an initializer still carries a name and feeds
   one node only, that the name is the expected parameter's.
3. Anything else, such as a weight the layout has no place for or a missing one, raises
   `GraphMismatchError`, whose plain message names the node.

Constant-folded positional encodings: the decoder's dense positional encoding is computed from the
Fourier matrix over a folded [64,64,2] grid (the cell centres, already mapped to [-1, 1]); the grid
is checked against the one the network computes. The neck's sine encoding is dead code in the
encoder graph (ignored).

`verify_conversion` then runs the converted network and the ONNX files (onnxruntime, CPU) on a fixed
probe and reports the differences against stated tolerances.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from safetensors.torch import save

from craftai_models import imagenet
from craftai_models.sam2.contract import DECODER_INPUTS, DECODER_OUTPUTS, ENCODER_INPUTS, ENCODER_OUTPUTS, WEIGHTS
from craftai_models.sam2.hiera import HieraConfig
from craftai_models.sam2.model import Sam2ImageModel, build_sam21_tiny
from craftai_prepare.converters import ConversionError, Converter, Step

CONVERTER_VERSION = 1


# Probe tolerances, fp32 on the CPU (this network in torch vs the ONNX files in onnxruntime). Both
# run the same arithmetic; the margins cover different kernels and thread counts (measured: about
# 1e-5 on logits of magnitude up to 32 with random weights).
PROBE_FEATURE_ATOL = 1e-3  # max abs diff on encoder outputs
PROBE_LOGIT_ATOL = 1e-3  # max abs diff on low-res mask logits
PROBE_MASK_IOU_MIN = 0.999  # IoU of the (logits > 0) masks, per mask
PROBE_IOU_PRED_ATOL = 1e-4  # max abs diff on predicted IoUs

_LABEL_KEYS = {
    -1: "prompt_encoder.not_a_point_embed.weight",
    0: "prompt_encoder.point_embeddings.0.weight",
    1: "prompt_encoder.point_embeddings.1.weight",
    2: "prompt_encoder.point_embeddings.2.weight",
    3: "prompt_encoder.point_embeddings.3.weight",
}
_FOURIER_KEY = "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"


class GraphMismatchError(ConversionError):
    """The ONNX file is not the SAM 2.1 tiny samexporter graph this converter knows."""


# --------------------------------------------------------------------------------------------
# Reading the graph


class _Graph:
    """Index of one ONNX model: constants, producers and consumers.

    Nodes inside the branches of If nodes are indexed too: they read outer names (Hiera's window
    position table is only reached through an If).
    """

    def __init__(self, model: onnx.ModelProto, label: str) -> None:
        self.label = label
        self.graph = model.graph
        self.nodes = list(model.graph.node)
        self.initializers: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.constants: dict[str, np.ndarray] = dict(self.initializers)
        self.producers: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for node in self._all_nodes(model.graph):
            for out in node.output:
                self.producers[out] = node
            for i, name in enumerate(node.input):
                if name:
                    self.consumers.setdefault(name, []).append((node, i))
            if node.op_type == "Constant":
                value = _constant_value(node)
                if value is not None:
                    self.constants[node.output[0]] = value

    def _all_nodes(self, graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
        for node in graph.node:
            yield node
            for sub in _subgraphs(node):
                yield from self._all_nodes(sub)

    def const(self, name: str) -> np.ndarray | None:
        return self.constants.get(name)

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        return users[0][0] if len(users) == 1 else None

    def error(self, node: onnx.NodeProto | None, message: str) -> GraphMismatchError:
        where = f" at node '{_node_label(node)}'" if node is not None else ""
        return GraphMismatchError(
            f"{self.label} is not the SAM 2.1 tiny (samexporter) graph this converter knows{where}: {message}"
        )


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return numpy_helper.to_array(a.t)
    return None


def _node_label(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type} -> {node.output[0] if node.output else '?'}"


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _is_float(a: np.ndarray | None) -> bool:
    return a is not None and a.dtype.kind == "f"


# --------------------------------------------------------------------------------------------
# Parametrised operations found in the graph


@dataclass
class _Op:
    """One parametrised operation recognised in the graph."""

    kind: str
    node: onnx.NodeProto
    tensors: dict[str, np.ndarray]
    sources: dict[str, str] = field(default_factory=dict)  # tensor role -> initializer/constant name
    info: dict[str, Any] = field(default_factory=dict)


def _scan(g: _Graph) -> list[_Op]:
    """Every parametrised operation of the top-level graph, in node order."""
    # The partner nodes of a pattern (a Linear's bias Add, a LayerNorm2d's Add) match no pattern themselves.
    return [op for op in (_recognise(g, node) for node in g.nodes) if op is not None]


def _recognise(g: _Graph, node: onnx.NodeProto) -> _Op | None:
    t = node.op_type
    ins = list(node.input)
    consts = [g.const(x) if x else None for x in ins]
    if t in ("Conv", "ConvTranspose") and _is_float(consts[1] if len(ins) > 1 else None):
        weight = consts[1]
        bias = consts[2] if len(ins) > 2 else None
        assert weight is not None
        tensors = {"weight": weight}
        sources = {"weight": ins[1]}
        if bias is not None:
            tensors["bias"], sources["bias"] = bias, ins[2]
        kind = "conv" if t == "Conv" else "conv_transpose"
        info: dict[str, Any] = {
            "strides": list(_attr(node, "strides", [1, 1])),
            "pads": list(_attr(node, "pads", [0, 0, 0, 0])),
            "group": _attr(node, "group", 1),
        }
        return _Op(kind, node, tensors, sources, info)
    if t == "Gemm" and len(ins) >= 2 and _is_float(consts[1]):
        weight = consts[1]
        assert weight is not None
        if _attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0 or _attr(node, "transA", 0):
            raise g.error(node, "a Gemm with alpha/beta/transA this network does not use")
        if not _attr(node, "transB", 0):
            weight = weight.T
        tensors = {"weight": weight}
        sources = {"weight": ins[1]}
        if len(ins) > 2 and consts[2] is not None:
            tensors["bias"], sources["bias"] = consts[2], ins[2]
        return _Op("linear", node, tensors, sources)
    if t == "MatMul" and _is_float(consts[1]) and consts[1] is not None and consts[1].ndim == 2:
        right = consts[1]
        user = g.only_consumer(node.output[0])
        if right.shape[0] == 2:  # coordinates [.., 2] @ G [2, N]: the random Fourier features
            return _Op("fourier", node, {"matrix": right}, {"matrix": ins[1]}, {"grid": consts[0]})
        if user is not None and user.op_type == "Add":
            other = [x for x in user.input if x != node.output[0]]
            bias = g.const(other[0]) if len(other) == 1 else None
            if bias is not None and bias.ndim == 1:
                return _Op("linear", node, {"weight": right.T, "bias": bias}, {"weight": ins[1], "bias": other[0]})
        raise g.error(node, f"a MatMul by a constant {list(right.shape)} that is not a Linear layer")
    if t == "LayerNormalization" and len(ins) >= 3 and _is_float(consts[1]) and _is_float(consts[2]):
        assert consts[1] is not None and consts[2] is not None
        return _Op(
            "layer_norm",
            node,
            {"weight": consts[1], "bias": consts[2]},
            {"weight": ins[1], "bias": ins[2]},
            {"eps": _attr(node, "epsilon", 1e-5), "axis": _attr(node, "axis", -1)},
        )
    if t == "Mul":
        return _recognise_mul(g, node, consts)
    if t == "Expand" and _is_float(consts[0]) and consts[0] is not None and consts[0].ndim == 3:
        return _Op("tokens", node, {"tokens": consts[0]}, {"tokens": ins[0]})
    if t == "Resize" and _is_float(consts[0]) and consts[0] is not None and consts[0].ndim == 4:
        return _recognise_position_embedding(g, node, consts[0])
    if t == "Add":
        for i, c in enumerate(consts):
            if _is_float(c) and c is not None and c.ndim == 3 and c.shape[:2] == (1, 1):
                return _Op("no_mem_embed", node, {"embed": c}, {"embed": ins[i]})
    return None


def _recognise_mul(g: _Graph, node: onnx.NodeProto, consts: list[np.ndarray | None]) -> _Op | None:
    """Mul by a constant: LayerNorm2d scale, a point-label embedding, or the no-mask embedding."""
    found = [(i, c) for i, c in enumerate(consts) if _is_float(c) and c is not None and c.size > 1]
    if len(found) != 1:
        return None
    i, c = found[0]
    other = node.input[1 - i]
    if c.ndim == 3 and c.shape[1:] == (1, 1):  # LayerNorm2d: weight[:, None, None] * x + bias[:, None, None]
        user = g.only_consumer(node.output[0])
        bias_name = [x for x in user.input if x != node.output[0]] if user is not None else []
        bias = g.const(bias_name[0]) if user is not None and user.op_type == "Add" and len(bias_name) == 1 else None
        if bias is None or bias.shape != c.shape:
            raise g.error(node, f"a Mul by a {list(c.shape)} constant not followed by the LayerNorm2d bias Add")
        return _Op("layer_norm_2d", node, {"weight": c, "bias": bias}, {"weight": node.input[i], "bias": bias_name[0]})
    if c.ndim == 2 and c.shape[0] == 1:  # embedding [1, C] * (point_labels == k)
        label = _equal_label(g, other)
        if label is None:
            raise g.error(node, "a [1, C] embedding multiplied by something other than `point_labels == k`")
        return _Op("label_embedding", node, {"embed": c}, {"embed": node.input[i]}, {"label": label})
    if c.ndim == 4 and c.shape[0] == 1 and c.shape[2:] == (1, 1):  # (1 - has_mask_input) * no_mask_embed
        sub = g.producers.get(other)
        if sub is None or sub.op_type != "Sub" or "has_mask_input" not in sub.input:
            raise g.error(node, "a [1, C, 1, 1] embedding not weighted by `1 - has_mask_input`")
        return _Op("no_mask_embed", node, {"embed": c}, {"embed": node.input[i]})
    return None


def _equal_label(g: _Graph, name: str) -> int | None:
    """k when `name` is Cast(Equal(<from point_labels>, k)), else None."""
    node = g.producers.get(name)
    while node is not None and node.op_type in ("Cast", "Identity"):
        node = g.producers.get(node.input[0])
    if node is None or node.op_type != "Equal":
        return None
    values = [g.const(x) for x in node.input]
    ks = [v for v in values if v is not None and v.size == 1]
    data = [x for x, v in zip(node.input, values, strict=True) if v is None or v.size != 1]
    if len(ks) != 1 or len(data) != 1 or not _derives_from(g, data[0], "point_labels", depth=8):
        return None
    k = float(ks[0].reshape(()))
    return int(k) if k == int(k) else None


def _derives_from(g: _Graph, name: str, graph_input: str, depth: int) -> bool:
    if name == graph_input:
        return True
    node = g.producers.get(name)
    if node is None or depth == 0:
        return False
    return any(_derives_from(g, x, graph_input, depth - 1) for x in node.input if x)


def _recognise_position_embedding(g: _Graph, node: onnx.NodeProto, background: np.ndarray) -> _Op:
    """Hiera: Resize(pos_embed, bicubic) + Tile(pos_embed_window); the window table hides behind an If."""
    if _attr(node, "mode") not in (b"cubic", "cubic"):
        raise g.error(node, "the position table is not resized bicubically")
    adds = [n for n, _ in g.consumers.get(node.output[0], []) if n.op_type == "Add"]  # (Shape nodes also read it)
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
    return _Op(
        "position_embedding",
        node,
        {"background": background, "window": window},
        {"background": node.input[0], "window": name},
    )


def _constants_behind(g: _Graph, name: str, depth: int) -> list[tuple[str, np.ndarray]]:
    """Float rank-4 constants that `name` is a view of (through Identity/Reshape/If branches)."""
    c = g.const(name)
    if c is not None:
        return [(name, c)] if _is_float(c) and c.ndim == 4 else []
    node = g.producers.get(name)
    if node is None or depth == 0:
        return []
    if node.op_type in ("Identity", "Reshape"):
        return _constants_behind(g, node.input[0], depth - 1)
    if node.op_type == "If":
        out: list[tuple[str, np.ndarray]] = []
        for sub in _subgraphs(node):
            for o in sub.output:
                out += _constants_behind(g, o.name, depth - 1)
        return out
    return []


# --------------------------------------------------------------------------------------------
# What the network expects, in the order it runs


@dataclass(frozen=True)
class _Expect:
    kind: str
    key: str  # module path in Sam2ImageModel (or a parameter key for single tensors)


def _linear(key: str) -> _Expect:
    return _Expect("linear", key)


def _encoder_layout(cfg: HieraConfig) -> list[_Expect]:
    trunk = "image_encoder.trunk"
    out = [_Expect("conv", f"{trunk}.patch_embed.proj")]
    dims = [cfg.embed_dim * 2**s for s, n in enumerate(cfg.stages) for _ in range(n)]
    for i in range(sum(cfg.stages)):
        block = f"{trunk}.blocks.{i}"
        dim_in = dims[i - 1] if i else dims[0]
        out.append(_Expect("layer_norm", f"{block}.norm1"))
        if dim_in != dims[i]:
            out.append(_linear(f"{block}.proj"))
        out += [
            _linear(f"{block}.attn.qkv"),
            _linear(f"{block}.attn.proj"),
            _Expect("layer_norm", f"{block}.norm2"),
            _linear(f"{block}.mlp.layers.0"),
            _linear(f"{block}.mlp.layers.1"),
        ]
    out += [_Expect("conv", f"image_encoder.neck.convs.{i}.conv") for i in range(len(cfg.stages))]
    out += [_Expect("conv", "mask_decoder.conv_s0"), _Expect("conv", "mask_decoder.conv_s1")]
    return out


# Operations found by their pattern alone, wherever they sit: how many of each the graph must have.
_ENCODER_SINGLETONS = {"position_embedding": 1, "no_mem_embed": 1}
_DECODER_SINGLETONS = {"fourier": 2, "label_embedding": len(_LABEL_KEYS), "no_mask_embed": 1, "tokens": 1}


def _attention(prefix: str) -> list[_Expect]:
    return [_linear(f"{prefix}.{p}_proj") for p in ("q", "k", "v", "out")]


def _decoder_layout(depth: int = 2, num_mask_tokens: int = 4) -> list[_Expect]:
    md = "prompt_encoder.mask_downscaling"
    out = [
        _Expect("conv", f"{md}.0"),
        _Expect("layer_norm_2d", f"{md}.1"),
        _Expect("conv", f"{md}.3"),
        _Expect("layer_norm_2d", f"{md}.4"),
        _Expect("conv", f"{md}.6"),
    ]
    tr = "mask_decoder.transformer"
    for i in range(depth):
        layer = f"{tr}.layers.{i}"
        out += [*_attention(f"{layer}.self_attn"), _Expect("layer_norm", f"{layer}.norm1")]
        out += [*_attention(f"{layer}.cross_attn_token_to_image"), _Expect("layer_norm", f"{layer}.norm2")]
        out += [_linear(f"{layer}.mlp.layers.0"), _linear(f"{layer}.mlp.layers.1")]
        out += [_Expect("layer_norm", f"{layer}.norm3")]
        out += [*_attention(f"{layer}.cross_attn_image_to_token"), _Expect("layer_norm", f"{layer}.norm4")]
    out += [*_attention(f"{tr}.final_attn_token_to_image"), _Expect("layer_norm", f"{tr}.norm_final_attn")]
    up = "mask_decoder.output_upscaling"
    out += [
        _Expect("conv_transpose", f"{up}.0"),
        _Expect("layer_norm_2d", f"{up}.1"),
        _Expect("conv_transpose", f"{up}.3"),
    ]
    for t in range(num_mask_tokens):
        out += [_linear(f"mask_decoder.output_hypernetworks_mlps.{t}.layers.{j}") for j in range(3)]
    out += [_linear(f"mask_decoder.iou_prediction_head.layers.{j}") for j in range(3)]
    return out


# --------------------------------------------------------------------------------------------
# Matching


class _Assembler:
    """Collects converted tensors, checking each against the network's parameter of that name."""

    def __init__(self, g: _Graph, reference: Sam2ImageModel) -> None:
        self.g = g
        self.reference = reference
        self.expected = reference.state_dict()
        self.out: dict[str, torch.Tensor] = {}
        self.used: set[str] = set()
        self.seen: set[str] = set()  # roles of singleton patterns already placed

    def put(self, op: _Op, key: str, value: np.ndarray, source: str | None) -> None:
        want = self.expected.get(key)
        if want is None:
            raise self.g.error(op.node, f"no parameter '{key}' in the network")
        if tuple(value.shape) != tuple(want.shape):
            raise self.g.error(op.node, f"'{key}' should be {list(want.shape)}, the graph has {list(value.shape)}")
        tensor = torch.from_numpy(np.array(value, dtype=np.float32, copy=True))
        if key in self.out and not torch.equal(self.out[key], tensor):
            raise self.g.error(op.node, f"two different values for '{key}'")
        if source is not None:
            self._check_name(op, key, source)
            self.used.add(source)
        self.out[key] = tensor

    def _check_name(self, op: _Op, key: str, source: str) -> None:
        """A named initializer that feeds this node only must carry this parameter's name.

        Meta's names differ from this network's in their first part (`sam_mask_decoder.conv_s0` vs
        `mask_decoder.conv_s0`), and the exporter prefixes the wrapper's attribute; the rest must agree.
        """
        if source not in self.g.initializers or source.startswith("onnx::") or source[:1].isdigit():
            return
        if len(self.g.consumers.get(source, [])) != 1:
            return  # shared by several nodes (deduplicated): its name is one of theirs
        tail = key.split(".", 1)[-1]
        if not (source == tail or source.endswith("." + tail)):
            raise self.g.error(op.node, f"the initializer '{source}' sits where '{key}' belongs")


_LAYER_KINDS = frozenset({"linear", "conv", "conv_transpose", "layer_norm", "layer_norm_2d"})


def _match(
    g: _Graph, ops: list[_Op], layout: Sequence[_Expect], singletons: Mapping[str, int], reference: Sam2ImageModel
) -> _Assembler:
    """Layers one to one in the order the network runs them; the other patterns by kind and count.

    The layers of one part form a dependency chain, so every exporter writes them in that order;
    the singletons (tables, tokens, embeddings) may come wherever the wrapper happened to compute
    them (the dense positional encoding before or after the prompts, for instance).
    """
    asm = _Assembler(g, reference)
    layers = [op for op in ops if op.kind in _LAYER_KINDS]
    for i, expect in enumerate(layout):
        if i >= len(layers):
            raise g.error(None, f"the graph ends before '{expect.key}' ({expect.kind}), after {len(layers)} layers")
        op = layers[i]
        if op.kind != expect.kind:
            raise g.error(op.node, f"expected the {expect.kind} '{expect.key}', found a {op.kind}")
        _HANDLERS[op.kind](asm, op, expect)
    if len(layers) > len(layout):
        extra = layers[len(layout)]
        raise g.error(extra.node, f"a layer ({extra.kind}) after the last layer of the network")
    for kind, count in singletons.items():
        found = [op for op in ops if op.kind == kind]
        if len(found) != count:
            where = found[count] if len(found) > count else None
            raise g.error(where.node if where else None, f"{len(found)} {kind} patterns where the network has {count}")
        for op in found:
            _HANDLERS[kind](asm, op, _Expect(kind, kind))
    stray = [op for op in ops if op.kind not in _LAYER_KINDS and op.kind not in singletons]
    if stray:
        raise g.error(stray[0].node, f"a {stray[0].kind} pattern that belongs to the other file")
    unused = [
        name
        for name, value in g.initializers.items()
        if name not in asm.used and _is_float(value) and value.size > 1 and g.consumers.get(name)
    ]
    if unused:
        node = g.consumers[unused[0]][0][0]
        raise g.error(node, f"weights the network has no place for: {', '.join(sorted(unused)[:5])}")
    return asm


def _put_weight_bias(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    for role in ("weight", "bias"):
        if role not in op.tensors:
            raise asm.g.error(op.node, f"'{expect.key}' has no {role} in the graph")
        asm.put(op, f"{expect.key}.{role}", op.tensors[role], op.sources.get(role))


def _handle_conv(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    module = asm.reference.get_submodule(expect.key)
    assert isinstance(module, torch.nn.Conv2d | torch.nn.ConvTranspose2d)
    stride, padding = list(module.stride), list(module.padding)
    if op.info["strides"] != stride or op.info["pads"] != padding * 2 or op.info["group"] != module.groups:
        raise asm.g.error(
            op.node,
            f"'{expect.key}' should have stride {stride}, padding {padding}, groups {module.groups}; the "
            f"graph has strides {op.info['strides']}, pads {op.info['pads']}, group {op.info['group']}",
        )
    _put_weight_bias(asm, op, expect)


def _handle_layer_norm(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    module = asm.reference.get_submodule(expect.key)
    assert isinstance(module, torch.nn.LayerNorm)
    eps = float(op.info["eps"])
    if not math.isclose(eps, module.eps, rel_tol=1e-4) or op.info["axis"] != -1:
        raise asm.g.error(op.node, f"'{expect.key}' should normalise the last axis with eps {module.eps}, got {eps}")
    _put_weight_bias(asm, op, expect)


def _handle_layer_norm_2d(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    # folded [C, 1, 1] -> [C]
    for role in ("weight", "bias"):
        asm.put(op, f"{expect.key}.{role}", op.tensors[role].reshape(-1), op.sources[role])


def _handle_fourier(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    """Two uses of the Fourier matrix: the prompt points, and the grid of the dense encoding."""
    asm.put(op, _FOURIER_KEY, op.tensors["matrix"], op.sources["matrix"])
    grid = op.info["grid"]
    role = "grid" if grid is not None else "points"
    if role in asm.seen:
        raise asm.g.error(op.node, f"a second Fourier encoding of the {role}")
    asm.seen.add(role)
    if grid is None and not _derives_from(asm.g, op.node.input[0], "point_coords", depth=12):
        raise asm.g.error(op.node, "a Fourier encoding of something other than point_coords or a fixed grid")
    if grid is not None:
        h, w = asm.reference.prompt_encoder.image_embedding_size
        ys, xs = (np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w
        centres = np.stack(np.meshgrid(xs, ys), axis=-1)  # [h, w, (x, y)] in [0, 1]
        folded = (2 * centres - 1).astype(np.float32)  # the encoding maps [0, 1] to [-1, 1] first
        if not isinstance(grid, np.ndarray) or grid.shape != folded.shape or not np.allclose(grid, folded, atol=1e-6):
            raise asm.g.error(op.node, f"the dense positional encoding is not taken at the {h}x{w} cell centres")


def _handle_label_embedding(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    label = int(op.info["label"])
    if label not in _LABEL_KEYS:
        raise asm.g.error(op.node, f"an embedding for point label {label}; the network knows -1, 0, 1, 2, 3")
    key = _LABEL_KEYS[label]
    if key in asm.out:
        raise asm.g.error(op.node, f"a second embedding for point label {label}")
    asm.put(op, key, op.tensors["embed"], op.sources["embed"])


def _handle_no_mask(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    asm.put(op, "prompt_encoder.no_mask_embed.weight", op.tensors["embed"].reshape(1, -1), op.sources["embed"])


def _handle_tokens(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    tokens = op.tensors["tokens"]
    n_mask = asm.reference.mask_decoder.num_mask_tokens
    if tokens.shape[:2] != (1, 2 + n_mask):
        raise asm.g.error(
            op.node,
            f"the output tokens should be [1, {2 + n_mask}, C] (object score, IoU, masks), "
            f"the graph has {list(tokens.shape)}",
        )
    asm.put(op, "mask_decoder.obj_score_token.weight", tokens[0, 0:1], None)
    asm.put(op, "mask_decoder.iou_token.weight", tokens[0, 1:2], None)
    asm.put(op, "mask_decoder.mask_tokens.weight", tokens[0, 2:], None)
    asm.used.add(op.sources["tokens"])


def _handle_position_embedding(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    trunk = "image_encoder.trunk"
    asm.put(op, f"{trunk}.pos_embed", op.tensors["background"], op.sources["background"])
    asm.put(op, f"{trunk}.pos_embed_window", op.tensors["window"], op.sources["window"])


def _handle_no_mem(asm: _Assembler, op: _Op, expect: _Expect) -> None:
    asm.put(op, "no_mem_embed", op.tensors["embed"], op.sources["embed"])


_HANDLERS: dict[str, Callable[[_Assembler, _Op, _Expect], None]] = {
    "linear": _put_weight_bias,
    "conv": _handle_conv,
    "conv_transpose": _handle_conv,
    "layer_norm": _handle_layer_norm,
    "layer_norm_2d": _handle_layer_norm_2d,
    "fourier": _handle_fourier,
    "label_embedding": _handle_label_embedding,
    "no_mask_embed": _handle_no_mask,
    "tokens": _handle_tokens,
    "position_embedding": _handle_position_embedding,
    "no_mem_embed": _handle_no_mem,
}


# --------------------------------------------------------------------------------------------
# Public functions


def _check_signature(g: _Graph, inputs: Sequence[str], outputs: Sequence[str]) -> None:
    got_in = tuple(i.name for i in g.graph.input if i.name not in g.initializers)
    got_out = tuple(o.name for o in g.graph.output)
    if got_in != tuple(inputs) or got_out != tuple(outputs):
        raise g.error(
            None,
            f"inputs {list(got_in)} and outputs {list(got_out)}; expected inputs {list(inputs)} "
            f"and outputs {list(outputs)}",
        )


def _reference_network() -> Sam2ImageModel:
    """The network without weights (meta device): shapes, strides and epsilons to check against."""
    with torch.device("meta"):
        return Sam2ImageModel()


def convert_encoder(model: onnx.ModelProto) -> dict[str, torch.Tensor]:
    """encoder.onnx -> the image encoder's weights, conv_s0/conv_s1 and no_mem_embed (network keys)."""
    g = _Graph(model, "encoder.onnx")
    _check_signature(g, ENCODER_INPUTS, ENCODER_OUTPUTS)
    return _match(g, _scan(g), _encoder_layout(HieraConfig()), _ENCODER_SINGLETONS, _reference_network()).out


def convert_decoder(model: onnx.ModelProto) -> dict[str, torch.Tensor]:
    """decoder.onnx -> the prompt encoder's and mask decoder's weights (network keys)."""
    g = _Graph(model, "decoder.onnx")
    _check_signature(g, DECODER_INPUTS, DECODER_OUTPUTS)
    return _match(g, _scan(g), _decoder_layout(), _DECODER_SINGLETONS, _reference_network()).out


def convert(encoder: onnx.ModelProto, decoder: onnx.ModelProto) -> dict[str, torch.Tensor]:
    """Both files -> the complete state_dict of `Sam2ImageModel` (every key, fp32)."""
    state = convert_encoder(encoder)
    decoder_state = convert_decoder(decoder)
    overlap = set(state) & set(decoder_state)
    if overlap:
        raise GraphMismatchError(f"the encoder and the decoder both carry {sorted(overlap)}")
    state.update(decoder_state)
    expected = _reference_network().state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise GraphMismatchError(f"the ONNX pair lacks weights of the network: {', '.join(missing[:8])}")
    return state


def load_onnx(path: Path) -> onnx.ModelProto:
    """Read an ONNX file (single file, weights inside, as samexporter publishes them)."""
    return onnx.load(str(path), load_external_data=False)


# --------------------------------------------------------------------------------------------
# Verification on a fixed probe


@dataclass(frozen=True)
class Tolerances:
    """What "agrees" means; None leaves that measure unchecked (reported only)."""

    feature_atol: float | None = PROBE_FEATURE_ATOL
    logit_atol: float | None = PROBE_LOGIT_ATOL
    mask_iou_min: float | None = PROBE_MASK_IOU_MIN
    iou_pred_atol: float | None = PROBE_IOU_PRED_ATOL


FP32 = Tolerances()


@dataclass(frozen=True)
class PromptResult:
    """Differences on one probe prompt (this network vs onnxruntime)."""

    name: str
    logits_max_abs: float
    mask_iou_min: float
    iou_pred_max_abs: float


@dataclass(frozen=True)
class ProbeReport:
    """Differences between the converted network and the ONNX files on the probe."""

    feature_max_abs: dict[str, float]
    prompts: list[PromptResult]

    @property
    def feature_max(self) -> float:
        return max(self.feature_max_abs.values())

    @property
    def logits_max_abs(self) -> float:
        return max(p.logits_max_abs for p in self.prompts)

    @property
    def mask_iou_min(self) -> float:
        return min(p.mask_iou_min for p in self.prompts)

    @property
    def iou_pred_max_abs(self) -> float:
        return max(p.iou_pred_max_abs for p in self.prompts)

    def failures(self, tol: Tolerances = FP32) -> list[str]:
        """Plain sentences, one per tolerance exceeded (empty when the conversion is good)."""
        out = []
        if tol.feature_atol is not None:
            out += [
                f"encoder output {k} differs by {v:.3g} (tolerance {tol.feature_atol})"
                for k, v in self.feature_max_abs.items()
                if not v <= tol.feature_atol
            ]
        for p in self.prompts:
            if tol.logit_atol is not None and not p.logits_max_abs <= tol.logit_atol:
                out.append(f"{p.name}: mask logits differ by {p.logits_max_abs:.3g} (tolerance {tol.logit_atol})")
            if tol.mask_iou_min is not None and not p.mask_iou_min >= tol.mask_iou_min:
                out.append(f"{p.name}: mask IoU {p.mask_iou_min:.5f} (at least {tol.mask_iou_min})")
            if tol.iou_pred_atol is not None and not p.iou_pred_max_abs <= tol.iou_pred_atol:
                out.append(
                    f"{p.name}: IoU predictions differ by {p.iou_pred_max_abs:.3g} (tolerance {tol.iou_pred_atol})"
                )
        return out

    @property
    def ok(self) -> bool:
        return not self.failures()


def probe_image(size: int = 1024) -> np.ndarray:
    """A deterministic picture, normalised like SAM's input: f32[1, 3, size, size].

    Smooth colour gradients, a bright disc, a dark rectangle and a fine stripe texture, so that
    the network sees edges, flat regions and high frequencies.
    """
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    r = 0.3 + 0.5 * x
    gch = 0.2 + 0.6 * y
    b = 0.5 + 0.25 * np.sin(12 * np.pi * x * y)
    disc = (x - 0.35) ** 2 + (y - 0.4) ** 2 < 0.15**2
    rect = (x > 0.55) & (x < 0.85) & (y > 0.55) & (y < 0.8)
    stripes = (np.floor(x * 64) % 2).astype(np.float32) * 0.15
    rgb = np.stack([r, gch, b]) + stripes
    rgb[:, disc] = np.array([0.95, 0.9, 0.2], dtype=np.float32)[:, None]
    rgb[:, rect] = np.array([0.1, 0.15, 0.3], dtype=np.float32)[:, None]
    rgb = np.clip(rgb, 0.0, 1.0)
    mean = np.array(imagenet.MEAN, dtype=np.float32)[:, None, None]
    std = np.array(imagenet.STD, dtype=np.float32)[:, None, None]
    normalised: np.ndarray = ((rgb - mean) / std)[None].astype(np.float32)
    return normalised


# (name, [(x, y, label)] in the 1024² frame, feed back the previous prompt's best mask)
PROBE_PROMPTS: tuple[tuple[str, tuple[tuple[float, float, float], ...], bool], ...] = (
    ("one foreground point", ((358.0, 410.0, 1.0),), False),
    ("foreground and background points", ((358.0, 410.0, 1.0), (720.0, 690.0, 0.0), (100.0, 900.0, 0.0)), False),
    ("box", ((560.0, 560.0, 2.0), (870.0, 820.0, 3.0)), False),
    ("box, point and the previous mask", ((560.0, 560.0, 2.0), (870.0, 820.0, 3.0), (700.0, 680.0, 1.0)), True),
)

Features = dict[str, np.ndarray]
EncodeFn = Callable[[np.ndarray], Features]
DecodeFn = Callable[[dict[str, np.ndarray]], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class ProbeOutputs:
    """What one engine answered on the probe: encoder outputs, then masks/IoUs per prompt (fp32)."""

    features: Features
    masks: list[np.ndarray]  # per prompt: [1, 3, 256, 256] logits
    iou_predictions: list[np.ndarray]  # per prompt: [1, 3]


def run_probe(encode: EncodeFn, decode: DecodeFn) -> ProbeOutputs:
    """The probe chain with any engine: encode once, then each prompt; the last prompt is fed the
    engine's own best previous mask (highest predicted IoU), as the service does on a refining click."""
    features = encode(probe_image())
    masks: list[np.ndarray] = []
    ious: list[np.ndarray] = []
    for _, points, feed_back in PROBE_PROMPTS:
        if feed_back:
            best = int(np.argmax(ious[-1][0]))
            mask_in = masks[-1][:, best : best + 1]
        else:
            mask_in = np.zeros((1, 1, 256, 256), dtype=np.float32)
        inputs = {
            **features,
            "point_coords": np.array([[[p[0], p[1]] for p in points]], dtype=np.float32),
            "point_labels": np.array([[p[2] for p in points]], dtype=np.float32),
            "mask_input": np.ascontiguousarray(mask_in, dtype=np.float32),
            "has_mask_input": np.array([1.0 if feed_back else 0.0], dtype=np.float32),
        }
        m, i = decode(inputs)
        masks.append(m.astype(np.float32))
        ious.append(i.astype(np.float32))
    return ProbeOutputs(features, masks, ious)


def probe_onnxruntime(encoder_path: Path, decoder_path: Path, *, threads: int = 2) -> ProbeOutputs:
    """The published graphs as published: onnxruntime, CPU provider."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    encoder = ort.InferenceSession(str(encoder_path), options, providers=providers)
    decoder = ort.InferenceSession(str(decoder_path), options, providers=providers)

    def encode(image: np.ndarray) -> Features:
        return dict(zip(ENCODER_OUTPUTS, encoder.run(list(ENCODER_OUTPUTS), {"image": image}), strict=True))

    def decode(inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        masks, iou = decoder.run(list(DECODER_OUTPUTS), {k: inputs[k] for k in DECODER_INPUTS})
        return masks, iou

    return run_probe(encode, decode)


def probe_network(
    net: Sam2ImageModel,
    *,
    device: str | torch.device = "cpu",
    encoder_autocast: torch.dtype | None = None,
    decoder_autocast: torch.dtype | None = None,
    channels_last: bool = False,
) -> ProbeOutputs:
    """This project's network on `device` (already moved there), each half optionally under autocast."""
    device = torch.device(device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def run(fn: Callable[[], tuple[torch.Tensor, ...]], dtype: torch.dtype | None) -> list[np.ndarray]:
        mixed = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with torch.inference_mode(), mixed:
            outputs = fn()
        return [t.float().cpu().numpy() for t in outputs]

    def encode(image: np.ndarray) -> Features:
        x = torch.from_numpy(image).to(device).contiguous(memory_format=memory_format)
        return dict(zip(ENCODER_OUTPUTS, run(lambda: net.encode(x), encoder_autocast), strict=True))

    def decode(inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        args = [torch.from_numpy(inputs[k]).to(device) for k in DECODER_INPUTS]
        masks, iou = run(lambda: net.decode(*args), decoder_autocast)
        return masks, iou

    return run_probe(encode, decode)


def _mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def compare_probe(ours: ProbeOutputs, reference: ProbeOutputs) -> ProbeReport:
    """Max abs differences and per-mask IoU of the (logits > 0) masks, prompt by prompt."""
    features = {k: float(np.abs(ours.features[k] - reference.features[k]).max()) for k in ENCODER_OUTPUTS}
    prompts = []
    for (name, _, _), m, i, rm, ri in zip(
        PROBE_PROMPTS, ours.masks, ours.iou_predictions, reference.masks, reference.iou_predictions, strict=True
    ):
        prompts.append(
            PromptResult(
                name=name,
                logits_max_abs=float(np.abs(m - rm).max()),
                mask_iou_min=min(_mask_iou(m[0, j] > 0, rm[0, j] > 0) for j in range(rm.shape[1])),
                iou_pred_max_abs=float(np.abs(i - ri).max()),
            )
        )
    return ProbeReport(features, prompts)


def verify_conversion(
    state_dict: Mapping[str, torch.Tensor], encoder_path: Path, decoder_path: Path, *, threads: int = 2
) -> ProbeReport:
    """Run the converted network (torch, fp32, CPU) and the ONNX files (onnxruntime, CPU) on the probe.

    Each engine runs the whole chain on its own outputs, as the service would; judge the report
    with `report.ok` / `report.failures()` (the fp32 tolerances above).
    """
    reference = probe_onnxruntime(encoder_path, decoder_path, threads=threads)
    return compare_probe(probe_network(build_sam21_tiny(state_dict)), reference)


# -- the prepare step ---------------------------------------------------------------------------------

#: The revision the catalogue's torch routes of the SAM 2 / 2.1 tiny recipes name (a test holds them equal).
REVISION = f"sam21-torch.{CONVERTER_VERSION}"


def prepare(sources: dict[str, Path], out: Path, step: Step) -> dict[str, float]:
    """Convert the encoder/decoder pair, check it against onnxruntime on the probe, write the weights."""
    step("reading the published encoder and decoder graphs")
    encoder, decoder = load_onnx(sources["encoder"]), load_onnx(sources["decoder"])
    step("following the graphs into the network's weights")
    state_dict = convert(encoder, decoder)
    del encoder, decoder
    step("checking the converted network against onnxruntime on the probe")
    report = verify_conversion(state_dict, sources["encoder"], sources["decoder"])
    if not report.ok:
        raise ConversionError("the converted network differs from the ONNX files: " + "; ".join(report.failures()))
    step("writing the weights")
    # Serialised in memory and written by Python, so a full disk is an OSError (ENOSPC) like any other.
    (out / WEIGHTS).write_bytes(save({k: v.contiguous() for k, v in state_dict.items()}))
    return {
        "feature_max_abs": report.feature_max,
        "logits_max_abs": report.logits_max_abs,
        "mask_iou_min": report.mask_iou_min,
        "iou_pred_max_abs": report.iou_pred_max_abs,
    }


CONVERTER = Converter(REVISION, prepare, steps=4)
