"""U²-Net's published graphs (u2netp; u2net and u2net_human_seg, the full network) -> a state_dict
for craftai_models.u2netp.U2Net at the network's widths (`U2NETP`, `U2NET`). The walk, the probe and
the checks are shared with the networks built from U²-Net's blocks (IS-Net: converters/isnet.py).

The weights are recovered by following the graph, not by reading initializer names: starting
from the graph input, the walk mirrors U2NetP.forward and, at each step, finds the node that
consumes the current value (the Conv, Relu, MaxPool, Resize, Concat, Add or Sigmoid that the
module applies next), checks its attributes and tensor shapes against the module, and takes its
weights wherever they come from (an initializer under any name, a Constant node, through Identity
or Transpose, shared with another conv). A conv followed by a BatchNormalization node is folded
here (the module has conv-with-bias; see its docstring). Every node of the graph must be matched
(the Resize size computations included), and the graph's outputs must be the module's seven maps
in order; anything else is refused with a ConversionError naming the node.

The published file (PyTorch 1.9 export, opset 11) holds 119 Conv (BatchNorm already folded, so
every conv has a bias), 112 Relu, 33 MaxPool (2x2, ceil mode), 38 Resize (linear,
pytorch_half_pixel, size taken from the skip tensor's Shape), 11 Add, 7 Sigmoid, plus the
Shape/Gather/Unsqueeze/Slice/Cast/Concat/Constant nodes that compute the Resize sizes. Exporters
that knew the input's size fold those into constants (whole or in part: IS-Net's graphs); a size is
then evaluated at the graph's input size, as the walk tracks every value's shape, and must be the
skip tensor's there.

``compare`` runs the converted network (torch, CPU, fp32) and the source graph (onnxruntime, CPU)
on the same input and reports per-output differences; ``check`` holds them to the tolerances
below (fp32 on the CPU). Both are what the prepare step runs before publishing a prepared folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import torch
from onnx import helper

from craftai_models import imagenet
from craftai_models.onnx_sessions import open_session
from craftai_models.u2netp import FULL, INPUT_SIZE, OUTPUT_NAMES, PORTABLE, RSU, WEIGHTS, WEIGHTS_FULL, U2Net
from craftai_prepare.converters import ConversionError, Converter, Step, own_files_only, write_weights
from craftai_prepare.onnx_graph import OnnxGraph, attribute, attributes, constant_value, describe

#: Bump whenever the converter's output could change (part of the prepared revision).
CONVERTER_VERSION = 1

#: Largest absolute difference allowed between the converted network (torch, fp32, CPU) and the
#: source graph (onnxruntime, CPU) on the fused map (values in [0, 1]), the map that is served.
#: Measured on an AVX2 CPU: 3.1e-5 on the probe, at most 7.5e-5 on the sample photos. Neither engine
#: is exact: against a float64 run of the same weights, torch is 3.4e-5 off on the probe and
#: onnxruntime 1.5e-5, because some convs add up large activations that cancel (see below).
#: A real conversion mistake is far above it: 1% off one conv's weights in De_3 moves the fused map
#: by 1.3e-3, swapped colour channels by 0.28, corner-aligned resizing by 0.40.
FUSED_MAX_ABS_TOLERANCE = 1e-4
#: The same for the six side maps. Side 2 (and side 1, which the fusion mostly follows) is the
#: least well-conditioned output: De_2's level-1 decoder conv sums activations up to ~230 with
#: cancellation, so fp32 rounding shows up to 7e-5 (probe) and 1.3e-4 (photos) there.
SIDE_MAX_ABS_TOLERANCE = 5e-4


Array = npt.NDArray[np.float32]
Shape = tuple[int, int, int]  # (C, H, W) of a value, at the graph's input size (N is 1)

# Nodes that only compute the sizes handed to Resize (from the Shape of the tensors involved).
_SIZE_OPS = frozenset({"Shape", "Gather", "Unsqueeze", "Squeeze", "Slice", "Cast", "Concat", "Constant", "Identity"})


def _show(attrs: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(attrs.items())) or "no attributes"


def _number(node: onnx.NodeProto, name: str, default: float) -> float:
    """A scalar attribute (int or float) of ``node``, or ``default`` when absent."""
    value = attribute(node, name, default)
    if not isinstance(value, int | float):
        raise ConversionError(f"{describe(node)}: attribute {name!r} is {value!r}, where a number is expected")
    return value


def _ints(value: object) -> list[int]:
    return [int(v) for v in value] if isinstance(value, list) else []


class Walk:
    """Matches a module's forward against the graph, one node at a time, and fills the state_dict;
    `network` (U²-Net's here, IS-Net's in converters/isnet.py) mirrors the module's forward and
    names the outputs the graph should declare, in order."""

    def __init__(self, model: onnx.ModelProto, module: torch.nn.Module, name: str) -> None:
        self.g = OnnxGraph(model)
        self.module = module
        self.name = name
        self.claimed: set[int] = set()  # positions of the nodes matched so far
        self.state: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, Shape] = {}  # every value the walk reached, at the graph's input size

    def network(self, x: str) -> list[str]:
        """Mirrors the module's forward from the graph input ``x``; the outputs' names, in order."""
        raise NotImplementedError

    # -- finding nodes -------------------------------------------------------------------------

    def _where(self, value: str) -> str:
        node = self.g.producers.get(value)
        return f"value {value!r} (from {describe(node)})" if node is not None else f"value {value!r}"

    def _claim(self, node: onnx.NodeProto) -> onnx.NodeProto:
        self.claimed.add(self.g.position(node))
        return node

    def _unclaimed(self, node: onnx.NodeProto) -> bool:
        return self.g.position(node) not in self.claimed

    def _next(self, value: str, op_type: str, purpose: str) -> onnx.NodeProto:
        """The one unmatched ``op_type`` node that takes ``value`` as its first input."""
        users = self.g.consumers.get(value, [])
        found = [n for n in users if self._unclaimed(n) and n.op_type == op_type and n.input[0] == value]
        if len(found) != 1:
            seen = sorted({n.op_type for n in users})
            raise ConversionError(
                f"{self._where(value)} should feed exactly one {op_type} node ({purpose}); "
                f"found {len(found)} (it feeds: {', '.join(seen) or 'nothing'})"
            )
        return self._claim(found[0])

    def _only_consumer(self, value: str, op_type: str, purpose: str) -> onnx.NodeProto:
        """Like ``_next``, but ``value`` must feed nothing else (e.g. a conv's pre-activation)."""
        users = self.g.consumers.get(value, [])
        node = self._next(value, op_type, purpose)
        if len(users) != 1:
            raise ConversionError(
                f"{self._where(value)} should feed only the {op_type} ({purpose}); it feeds "
                + ", ".join(describe(n) for n in users)
            )
        return node

    def _constant(self, value: str, user: onnx.NodeProto) -> npt.NDArray[np.generic]:
        """A stored tensor: an initializer, a Constant node, or either through Identity/Transpose."""
        stored, chain = self.g.behind(value, ("Identity", "Transpose"))
        for node in chain:
            self._claim(node)
        user = chain[-1] if chain else user
        if stored in self.g.initializers:
            array: npt.NDArray[np.generic] = self.g.initializers[stored]
        else:
            producer = self.g.producers.get(stored)
            if producer is None:
                raise ConversionError(f"{describe(user)}: input {stored!r} is neither stored nor computed in the graph")
            if producer.op_type != "Constant":
                raise ConversionError(
                    f"{describe(user)}: input {stored!r} is computed by {describe(producer)}, "
                    f"where {self.name} has a stored tensor"
                )
            self._claim(producer)
            found = constant_value(producer)
            if found is None:
                raise ConversionError(f"{describe(producer)}: only a tensor 'value' constant is understood")
            array = found
        for node in reversed(chain):  # innermost first
            if node.op_type == "Transpose":
                array = np.transpose(array, _ints(attribute(node, "perm")) or None)
        return array

    def _store(self, key: str, array: npt.NDArray[np.generic], node: onnx.NodeProto) -> None:
        expected = self.module.get_parameter(key)
        if tuple(array.shape) != tuple(expected.shape):
            raise ConversionError(
                f"{describe(node)} ({key}): shape {tuple(array.shape)}, where {self.name} has {tuple(expected.shape)}"
            )
        # A fresh float32 copy per key: shared initializers must not share storage (safetensors refuses it).
        self.state[key] = torch.from_numpy(np.array(array, dtype=np.float32, copy=True))

    # -- the module's operations ---------------------------------------------------------------

    def conv(self, x: str, key: str, *, relu: bool) -> str:
        """The Conv (optionally + BatchNormalization) [+ Relu] that the module's ``key`` conv is."""
        module = self.module.get_submodule(key)
        assert isinstance(module, torch.nn.Conv2d)
        node = self._next(x, "Conv", key)
        attrs = attributes(node)
        weight = self._constant(node.input[1], node).astype(np.float64)
        has_bias = len(node.input) > 2 and node.input[2] != ""
        bias = self._constant(node.input[2], node).astype(np.float64) if has_bias else np.zeros(weight.shape[:1])
        dilation = _ints(attrs.get("dilations")) or [1, 1]
        kernel = _ints(attrs.get("kernel_shape")) or list(weight.shape[2:])
        want_dilation = list(module.dilation)
        want_pads = [int(p) for p in module.padding] * 2
        problems = []
        if attrs.get("auto_pad", "NOTSET") != "NOTSET":
            problems.append(f"auto_pad {attrs['auto_pad']!r}")
        if _number(node, "group", 1) != 1:
            problems.append(f"group {attrs['group']}")
        strides = _ints(attrs.get("strides")) or [1, 1]
        if strides != list(module.stride):
            problems.append(f"strides {strides} ({self.name}: {list(module.stride)})")
        if kernel != list(module.kernel_size):
            problems.append(f"kernel {kernel} ({self.name}: {list(module.kernel_size)})")
        if dilation != want_dilation:
            problems.append(f"dilations {dilation} ({self.name}: {want_dilation})")
        if (_ints(attrs.get("pads")) or [0, 0, 0, 0]) != want_pads:
            problems.append(f"pads {attrs.get('pads')} ({self.name}: {want_pads})")
        if problems:
            raise ConversionError(f"{describe(node)} ({key}): " + ", ".join(problems))
        out = node.output[0]
        pads = _ints(attrs.get("pads")) or [0, 0, 0, 0]
        size = [
            (n + pads[i] + pads[i + 2] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1
            for i, n in enumerate(self._shape(x)[1:])
        ]
        shape = (int(weight.shape[0]), size[0], size[1])
        self.shapes[out] = shape
        following = self.g.consumers.get(out, [])
        if len(following) == 1 and following[0].op_type == "BatchNormalization":
            bn = self._only_consumer(out, "BatchNormalization", key)
            weight, bias = self._fold(bn, weight, bias)
            out = bn.output[0]
        self._store(f"{key}.weight", weight, node)
        self._store(f"{key}.bias", bias, node)
        if relu:
            out = self._only_consumer(out, "Relu", f"the ReLU after {key}").output[0]
        self.shapes[out] = shape
        return out

    def _shape(self, value: str) -> Shape:
        found = self.shapes.get(value)
        if found is None:  # cannot happen while the walk records what it reaches; kept as a guard
            raise ConversionError(f"{self._where(value)}: its shape is not known to the walk")
        return found

    def _fold(
        self, bn: onnx.NodeProto, weight: npt.NDArray[np.float64], bias: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Fold an inference BatchNormalization into the conv before it (in float64)."""
        if _number(bn, "training_mode", 0) != 0 or len(bn.output) > 1 or len(bn.input) != 5:
            raise ConversionError(f"{describe(bn)}: a training-mode BatchNormalization cannot be folded")
        scale, shift, mean, var = (self._constant(name, bn).astype(np.float64) for name in bn.input[1:5])
        eps = _number(bn, "epsilon", 1e-5)
        factor = scale / np.sqrt(var + eps)
        if factor.shape != bias.shape:
            raise ConversionError(f"{describe(bn)}: {factor.shape[0]} channels after a {bias.shape[0]}-channel conv")
        return weight * factor[:, None, None, None], (bias - mean) * factor + shift

    def pool(self, x: str) -> str:
        node = self._next(x, "MaxPool", "max-pool 2x2")
        attrs = attributes(node)
        ok = (
            _ints(attrs.get("kernel_shape")) == [2, 2]
            and _ints(attrs.get("strides")) == [2, 2]
            and (_ints(attrs.get("pads")) or [0, 0, 0, 0]) == [0, 0, 0, 0]
            and (_ints(attrs.get("dilations")) or [1, 1]) == [1, 1]
            and _number(node, "ceil_mode", 0) == 1
            and attrs.get("auto_pad", "NOTSET") == "NOTSET"
            and len(node.output) == 1
        )
        if not ok:
            raise ConversionError(
                f"{describe(node)}: {self.name} pools 2x2 with stride 2 in ceil mode; got {_show(attrs)}"
            )
        channels, height, width = self._shape(x)
        self.shapes[node.output[0]] = (channels, -(-height // 2), -(-width // 2))
        return node.output[0]

    def upsample_like(self, x: str, like: str) -> str:
        node = self._next(x, "Resize", f"bilinear resize to the size of {like!r}")
        attrs = attributes(node)
        mode = attrs.get("mode", "nearest")
        transform = attrs.get("coordinate_transformation_mode", "half_pixel")
        if (
            mode != "linear"
            or transform not in ("pytorch_half_pixel", "half_pixel")
            or _number(node, "antialias", 0) != 0
            or "axes" in attrs
        ):
            raise ConversionError(
                f"{describe(node)}: {self.name} resizes bilinearly with half-pixel centres and no antialias; "
                f"got {_show(attrs)}"
            )
        inputs = list(node.input) + [""] * (4 - len(node.input))
        roi, scales, sizes = inputs[1:4]
        if roi and self._constant(roi, node).size != 0:
            raise ConversionError(f"{describe(node)}: resizes a region; {self.name} resizes the whole tensor")
        channels, height, width = self._shape(x)
        want = self._shape(like)[1:]
        if scales and self._constant(scales, node).size != 0:
            raise ConversionError(
                f"{describe(node)}: resizes by fixed scales; {self.name} resizes to the skip tensor's size"
            )
        if not sizes:
            raise ConversionError(
                f"{describe(node)}: has no sizes input; {self.name} resizes to the skip tensor's size"
            )
        value, sources = self._size(sizes, node)
        got = tuple(int(v) for v in value.ravel()[2:]) if value.size == 4 else ()
        if not sources <= {x, like}:
            raise ConversionError(
                f"{describe(node)}: its size comes from the shapes of {sorted(sources)}; "
                f"{self.name} takes it from {like!r}"
            )
        if got != want:
            raise ConversionError(
                f"{describe(node)}: sizes {value.ravel().tolist()} at the graph's input size, where "
                f"{self.name} resizes {(height, width)} to the size of {like!r}, {want}"
            )
        self.shapes[node.output[0]] = (channels, *want)
        return node.output[0]

    def _size(self, value: str, user: onnx.NodeProto) -> tuple[npt.NDArray[np.generic], set[str]]:
        """The value of the size computation ending at ``value``, evaluated at the shapes
        the walk tracked, and the tensors whose Shape it reads (claims its nodes)."""
        if value in self.g.initializers:
            return self.g.initializers[value], set()
        node = self.g.producers.get(value)
        if node is None:
            raise ConversionError(f"{describe(user)}: input {value!r} is not computed in the graph")
        if node.op_type not in _SIZE_OPS:
            raise ConversionError(f"{describe(user)}: its size is computed by {describe(node)}, not from shapes")
        self._claim(node)
        if node.op_type == "Shape":
            full = np.array([1, *self._shape(node.input[0])], dtype=np.int64)
            return full[_number(node, "start", 0) : attribute(node, "end", None)], {node.input[0]}
        if node.op_type == "Constant":
            found = constant_value(node)
            if found is None:
                raise ConversionError(f"{describe(node)}: only a tensor 'value' constant is understood")
            return found, set()
        parts = [self._size(name, node) if name else (None, set()) for name in node.input]
        sources = set().union(*(p[1] for p in parts))
        return _evaluate(node, [p[0] for p in parts]), sources

    def cat(self, parts: Sequence[str], purpose: str) -> str:
        found = [
            n
            for n in self.g.consumers.get(parts[0], [])
            if self._unclaimed(n)
            and n.op_type == "Concat"
            and list(n.input) == list(parts)
            and _number(n, "axis", 0) in (1, -3)
        ]
        if len(found) != 1:
            raise ConversionError(
                f"expected one Concat of {list(parts)} along channels ({purpose}), found {len(found)}; "
                f"{self._where(parts[0])}"
            )
        shapes = [self._shape(p) for p in parts]
        out = self._claim(found[0]).output[0]
        self.shapes[out] = (sum(c for c, _, _ in shapes), *shapes[0][1:])
        return out

    def add(self, a: str, b: str, purpose: str) -> str:
        found = [
            n
            for n in self.g.consumers.get(a, [])
            if self._unclaimed(n) and n.op_type == "Add" and sorted(n.input) == sorted((a, b))
        ]
        if len(found) != 1:
            raise ConversionError(f"expected one Add of {a!r} and {b!r} ({purpose}), found {len(found)}")
        out = self._claim(found[0]).output[0]
        self.shapes[out] = self._shape(a)
        return out

    def sigmoid(self, x: str, purpose: str) -> str:
        out = self._next(x, "Sigmoid", purpose).output[0]
        self.shapes[out] = self._shape(x)
        return out

    # -- the network -----------------------------------------------------------------------------

    def rsu(self, x: str, key: str) -> str:
        """Mirrors RSU.forward."""
        block = self.module.get_submodule(key)
        assert isinstance(block, RSU)
        hx_in = self.conv(x, f"{key}.conv_in.conv", relu=True)
        skips: list[str] = []
        hx = hx_in
        for level in range(1, block.height):
            if level > 1 and not block.dilated:
                hx = self.pool(hx)
            hx = self.conv(hx, f"{key}.encoder.{level - 1}.conv", relu=True)
            skips.append(hx)
        hx = self.conv(hx, f"{key}.bottom.conv", relu=True)
        for level in range(block.height - 1, 0, -1):
            hx = self.cat((hx, skips[level - 1]), f"{key} decoder level {level}")
            hx = self.conv(hx, f"{key}.decoder.{level - 1}.conv", relu=True)
            if level > 1 and not block.dilated:
                hx = self.upsample_like(hx, skips[level - 2])
        return self.add(hx, hx_in, f"{key} residual")

    def stages(self, x: str) -> dict[int, str]:
        """U²-Net's six encoder and five decoder stages from ``x``: stage k's decoder output (De_k;
        En_6 for k = 6)."""
        hx1 = self.rsu(x, "en_1")
        hx2 = self.rsu(self.pool(hx1), "en_2")
        hx3 = self.rsu(self.pool(hx2), "en_3")
        hx4 = self.rsu(self.pool(hx3), "en_4")
        hx5 = self.rsu(self.pool(hx4), "en_5")
        hx6 = self.rsu(self.pool(hx5), "en_6")
        deeper = hx6
        decoded = {6: hx6}
        for stage, skip in ((5, hx5), (4, hx4), (3, hx3), (2, hx2), (1, hx1)):
            joined = self.cat((self.upsample_like(deeper, skip), skip), f"de_{stage} input")
            deeper = decoded[stage] = self.rsu(joined, f"de_{stage}")
        return decoded


class U2NetWalk(Walk):
    """U²-Net's graph."""

    def network(self, x: str) -> list[str]:
        """Mirrors U2Net.forward; returns the names of the seven output values."""
        decoded = self.stages(x)
        s1 = self.conv(decoded[1], "side_1", relu=False)
        sides = [s1] + [self.upsample_like(self.conv(decoded[k], f"side_{k}", relu=False), s1) for k in range(2, 7)]
        fused = self.conv(self.cat(sides, "fusion input"), "fuse", relu=False)
        maps = zip([fused, *sides], OUTPUT_NAMES, strict=True)
        return [self.sigmoid(value, f"the sigmoid of {name}") for value, name in maps]


def _graph_input(walk: Walk, side: int) -> str:
    """The graph's one picture input; its shape recorded, at ``side`` where the graph names a dimension."""
    inputs = walk.g.inputs()
    name = walk.name
    if len(inputs) != 1:
        raise ConversionError(f"{name} has one input; the graph has {len(inputs)}: {[i.name for i in inputs]}")
    tensor = inputs[0].type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if tensor.elem_type != onnx.TensorProto.FLOAT or len(dims) != 4 or dims[1] not in (3, None):
        raise ConversionError(
            f"graph input {inputs[0].name!r}: {name} takes float32 [N, 3, H, W]; got element type "
            f"{onnx.TensorProto.DataType.Name(tensor.elem_type)}, dims {dims}"
        )
    walk.shapes[inputs[0].name] = (3, dims[2] or side, dims[3] or side)
    return inputs[0].name


def _evaluate(node: onnx.NodeProto, values: list[npt.NDArray[np.generic] | None]) -> npt.NDArray[np.generic]:
    """One node of a size computation (`_SIZE_OPS` but Shape and Constant) on known values."""
    data = values[0]
    if data is None:
        raise ConversionError(f"{describe(node)}: has no first input")
    op, more = node.op_type, values[1:]

    def axes() -> tuple[int, ...]:  # an attribute before opset 13, an input since
        given = more[0] if more and more[0] is not None else attribute(node, "axes", [])
        return tuple(int(a) for a in np.asarray(given).ravel())

    if op in ("Identity",):
        return data
    if op == "Cast":
        return data.astype(helper.tensor_dtype_to_np_dtype(int(attribute(node, "to"))))
    if op == "Gather":
        return np.take(data, np.asarray(more[0]), axis=int(_number(node, "axis", 0)))
    if op == "Unsqueeze":
        return np.expand_dims(data, axes())
    if op == "Squeeze":
        return np.squeeze(data, axes() or None)
    if op == "Concat":
        return np.concatenate([v for v in values if v is not None], axis=int(_number(node, "axis", 0)))
    if op == "Slice":  # starts, ends, axes, steps: inputs since opset 10
        starts, ends, *rest = [np.asarray(v).ravel() for v in more if v is not None] or [
            np.asarray(attribute(node, "starts", [])),
            np.asarray(attribute(node, "ends", [])),
        ]
        on = rest[0] if rest else np.asarray(attribute(node, "axes", range(len(starts))))
        steps = rest[1] if len(rest) > 1 else np.ones_like(starts)
        cut = [slice(None)] * data.ndim
        for a, b, e, k in zip(on, starts, ends, steps, strict=True):
            cut[int(a)] = slice(int(b), int(e), int(k))
        return data[tuple(cut)]
    raise ConversionError(f"{describe(node)}: not understood in a size computation")


@dataclass(frozen=True)
class Network:
    """A published graph's network: its name in messages, the module its weights load into (strict),
    the walk that follows its graph, the maps ``forward`` answers (the served one first) and the
    largest difference kept on it and on the others, the prepared weights' file, the revision the
    catalogue's torch route names (a test holds the two equal), and its probe: the input side the
    graph was exported for, rembg's normalisation of the recipe, onnxruntime's threads (0: every
    core, for the 1024² networks)."""

    name: str
    module: Callable[[], torch.nn.Module]
    walk: type[Walk]
    weights: str
    revision: str
    outputs: tuple[str, ...] = OUTPUT_NAMES
    tolerances: tuple[float, float] = (FUSED_MAX_ABS_TOLERANCE, SIDE_MAX_ABS_TOLERANCE)
    side: int = INPUT_SIZE
    mean: tuple[float, float, float] = imagenet.MEAN
    std: tuple[float, float, float] = imagenet.STD
    threads: int = 1


U2NETP = Network("u2netp", partial(U2Net, PORTABLE), U2NetWalk, WEIGHTS, f"u2netp-torch.{CONVERTER_VERSION}")
U2NET = Network("u2net", partial(U2Net, FULL), U2NetWalk, WEIGHTS_FULL, f"u2net-torch.{CONVERTER_VERSION}")


def convert(model: onnx.ModelProto, network: Network = U2NETP) -> dict[str, torch.Tensor]:
    """The state_dict (float32, loads strict into the network's module) recovered by following
    ``model``'s graph.

    Raises ConversionError, naming the node, when the graph's structure, attributes or tensor shapes
    are not those of the network, when a node is left unmatched, or when the outputs are not the
    network's maps in the published order (followed, where the walk names them, by the features
    the graph may also declare).
    """
    name = network.name
    module = network.module()
    walk = network.walk(model, module, name)
    outputs = walk.network(_graph_input(walk, network.side))
    declared = [o.name for o in model.graph.output]
    maps = len(network.outputs)
    if declared[:maps] != outputs[:maps] or declared != outputs[: len(declared)]:
        raise ConversionError(
            f"the graph's outputs are {declared}; {name}'s are {', '.join(network.outputs)}: {outputs}"
        )
    left = [node for i, node in enumerate(walk.g.nodes) if i not in walk.claimed]
    if left:
        shown = ", ".join(describe(n) for n in left[:5])
        raise ConversionError(f"{len(left)} node(s) are not part of {name}: {shown}")
    missing = sorted(set(module.state_dict()) - set(walk.state))
    if missing:  # cannot happen while the walk mirrors forward; kept as a guard for later edits
        raise ConversionError(f"the walk did not reach {missing}")
    return walk.state


# -- verification ------------------------------------------------------------------------------------


def rembg_input(picture: Array, network: Network = U2NETP) -> Array:
    """rembg's input from an H x W x 3 picture already resized to the network's side (any numeric
    type): divided by the picture's own maximum (not by 255), then the recipe's mean/std (ImageNet's
    for U²-Net); -> f32[1, 3, H, W]."""
    x = np.asarray(picture, dtype=np.float64)
    x = x / max(float(x.max()), 1e-6)
    x = (x - np.asarray(network.mean)) / np.asarray(network.std)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def probe_input(batch: int = 1, network: Network = U2NETP) -> Array:
    """A fixed input, the same on every machine (closed-form, no random generator): a bright disc and a
    darker square on a striped gradient, at the network's side (320² for U²-Net), normalised like
    rembg; -> f32[batch, 3, side, side].

    It has a clear subject, so the saliency maps are far from constant and the comparison means something.
    """
    n = network.side
    yy, xx = np.meshgrid(np.arange(n) / n, np.arange(n) / n, indexing="ij")
    background = 0.35 + 0.25 * xx + 0.1 * np.sin(40 * yy + 7 * xx)
    disc = ((xx - 0.45) ** 2 + (yy - 0.5) ** 2) < 0.07
    square = (np.abs(xx - 0.8) < 0.08) & (np.abs(yy - 0.2) < 0.08)
    channels = []
    for k, tint in enumerate((0.95, 0.55, 0.25)):
        c = background * (0.8 + 0.1 * k) + 0.05 * np.cos(23 * xx * (k + 1) + 31 * yy)
        c = np.where(disc, tint + 0.05 * np.sin(60 * xx + 10 * k), c)
        c = np.where(square, 0.1 + 0.05 * k, c)
        channels.append(c)
    picture = np.clip(np.stack(channels, axis=-1), 0.0, 1.0) * 255.0
    one = rembg_input(picture.astype(np.float32), network)
    return np.repeat(one, batch, axis=0)


def run_reference(model: onnx.ModelProto, inputs: Array, *, threads: int = 1) -> list[Array]:
    """The source graph through onnxruntime (CPU), one picture at a time (the published batch is 1)."""
    session = open_session(model.SerializeToString(), "cpu", intra_op_threads=threads)
    name = session.get_inputs()[0].name
    per_picture = [session.run(None, {name: inputs[i : i + 1]}) for i in range(inputs.shape[0])]
    return [
        np.concatenate([np.asarray(p[k], dtype=np.float32) for p in per_picture]) for k in range(len(per_picture[0]))
    ]


def run_converted(state_dict: dict[str, torch.Tensor], inputs: Array, network: Network = U2NETP) -> list[Array]:
    """The converted network (torch, CPU, fp32), loaded strict."""
    module = network.module()
    module.load_state_dict(state_dict, strict=True)
    module.eval()
    with torch.inference_mode():
        outputs = module(torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32)))
    return [t.numpy() for t in outputs]


@dataclass(frozen=True)
class OutputDifference:
    """How far one converted output is from the source graph's.

    ``max_rel`` is ``max_abs`` over the reference's largest magnitude (per-element ratios explode
    where the sigmoid is ~0, so they say nothing).
    """

    name: str
    max_abs: float
    max_rel: float


def differences(
    ours: Iterable[Array], reference: Iterable[Array], names: Sequence[str] = OUTPUT_NAMES
) -> list[OutputDifference]:
    """Per-output differences, named as the network's outputs (U2Net's: fused first)."""
    result = []
    for name, a, b in zip(names, ours, reference, strict=True):
        if a.shape != b.shape:
            raise ConversionError(f"output {name}: shape {a.shape} against the graph's {b.shape}")
        max_abs = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        result.append(OutputDifference(name, max_abs, max_abs / max(float(np.max(np.abs(b))), 1e-12)))
    return result


def compare(
    model: onnx.ModelProto,
    state_dict: dict[str, torch.Tensor],
    inputs: Array | None = None,
    *,
    threads: int | None = None,
    network: Network = U2NETP,
) -> list[OutputDifference]:
    """Runs the converted network and the source graph on ``inputs`` (default: the probe) and reports
    the differences of the network's maps (a graph's further outputs, features, are not compared)."""
    x = probe_input(network=network) if inputs is None else inputs
    maps = len(network.outputs)
    reference = run_reference(model, x, threads=network.threads if threads is None else threads)[:maps]
    return differences(run_converted(state_dict, x, network), reference, network.outputs)


def tolerance(name: str, network: Network = U2NETP) -> float:
    """The largest absolute difference kept for the output ``name`` (see the constants above)."""
    served, others = network.tolerances
    return served if name == network.outputs[0] else others


def check(found: Sequence[OutputDifference], network: Network = U2NETP) -> None:
    """Refuses a conversion whose outputs differ from the source graph's by more than the tolerances."""
    bad = [d for d in found if not d.max_abs <= tolerance(d.name, network)]  # "not <=" also catches NaN
    if bad:
        shown = ", ".join(f"{d.name} {d.max_abs:.3g} (kept: {tolerance(d.name, network):g})" for d in bad)
        raise ConversionError(
            f"the converted {network.name} differs from the source graph by more than allowed: {shown}"
        )


# -- the prepare step ---------------------------------------------------------------------------------

#: The revision the catalogue's torch route of u2netp names (a test holds the two equal).
REVISION = U2NETP.revision


def preparation(network: Network) -> Callable[[Mapping[str, Path], Path, Step], dict[str, float]]:
    """The prepare step of ``network``: convert the published graph, check it against onnxruntime on
    the probe, write the weights."""

    def prepare(sources: Mapping[str, Path], out: Path, step: Step) -> dict[str, float]:
        step("reading the published ONNX graph")
        model = onnx.load(str(sources["network"]))
        step("following the graph into the network's weights")
        state_dict = convert(model, network)
        step("checking the converted network against onnxruntime on the probe")
        found = compare(model, state_dict, network=network)
        check(found, network)
        step("writing the weights")
        write_weights(out / network.weights, state_dict)
        return {f"max_abs_{d.name}": d.max_abs for d in found}

    return prepare


CONVERTER = Converter(U2NETP.revision, own_files_only(preparation(U2NETP)), steps=4)
CONVERTER_FULL = Converter(U2NET.revision, own_files_only(preparation(U2NET)), steps=4)
