"""Reading a published ONNX graph: stored tensors, who makes and who reads each value, attributes.

The converters recover weights by following the graph, because exporters rename, merge and
transpose initializers; so each needs the same index of it: the tensor behind a name (an
initializer or a Constant node), the node that produces a value and the nodes that read it, and
a node's attributes as plain Python values. The index only reads; what a converter has matched
so far (u2netp claims nodes, SAM collects weights) stays in that converter.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


class OnnxGraph:
    """Index of one model's top-level graph.

    `nodes` are the top-level nodes in stored (topological) order. With `branches`, the nodes inside
    the bodies of If/Loop/Scan nodes are indexed as producers and consumers too (they may read
    outer names), and their Constant nodes count as stored tensors; `nodes` stays the top level.
    `consumers` lists a node once per input slot that reads the value.
    """

    def __init__(self, model: onnx.ModelProto, *, branches: bool = False) -> None:
        self.graph = model.graph
        self.nodes = list(model.graph.node)
        self.initializers: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.constants: dict[str, np.ndarray] = dict(self.initializers)
        self.producers: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        # Protobuf messages cannot be hashed; the index holds every node object it hands out, so
        # their identities are stable and name the top-level node's position.
        self._positions = {id(node): i for i, node in enumerate(self.nodes)}
        for node in _nodes(self.nodes, branches):
            for name in node.output:
                if name:
                    self.producers[name] = node
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)
            if node.op_type == "Constant":
                value = constant_value(node)
                if value is not None:
                    self.constants[node.output[0]] = value

    def constant(self, name: str) -> np.ndarray | None:
        """The stored tensor named `name` (an initializer or a Constant node's output), else None."""
        return self.constants.get(name)

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        """The node that reads `name`, when exactly one input slot of the graph reads it."""
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 else None

    def position(self, node: onnx.NodeProto) -> int:
        """Where a top-level node (one this index handed out) stands in `nodes`."""
        return self._positions[id(node)]

    def behind(self, name: str, ops: Collection[str]) -> tuple[str, list[onnx.NodeProto]]:
        """The value `name` is made from through a chain of `ops` nodes (Identity, Cast...), each taking
        the previous one's first input, and that chain, nearest node first."""
        chain: list[onnx.NodeProto] = []
        node = self.producers.get(name)
        while node is not None and node.op_type in ops:
            chain.append(node)
            name = node.input[0]
            node = self.producers.get(name)
        return name, chain

    def inputs(self) -> list[onnx.ValueInfoProto]:
        """The graph's real inputs: old exporters list the initializers among the inputs too."""
        return [i for i in self.graph.input if i.name not in self.initializers]


def _nodes(nodes: Iterable[onnx.NodeProto], branches: bool) -> Iterator[onnx.NodeProto]:
    """Every node, depth first: a node, then (with `branches`) the nodes of its bodies."""
    for node in nodes:
        yield node
        if branches:
            for body in subgraphs(node):
                yield from _nodes(body.node, branches)


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The bodies a node carries (If branches, Loop/Scan bodies)."""
    return [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """A Constant node's tensor `value`; None for the other forms (value_float, sparse_value...)."""
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return numpy_helper.to_array(a.t)
    return None


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded, so that messages read plainly)."""
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


def attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """One attribute as a Python value, `default` when the node does not set it."""
    return attributes(node).get(name, default)


def name_of(node: onnx.NodeProto) -> str:
    """What a message quotes for a node: its name, or its kind and first output when unnamed."""
    return node.name or f"{node.op_type} -> {node.output[0] if node.output else '?'}"


def describe(node: onnx.NodeProto) -> str:
    """A node in words, for a message: its name and kind, or its kind and outputs when unnamed."""
    if node.name:
        return f"node {node.name!r} ({node.op_type})"
    return f"a {node.op_type} node (unnamed, outputs {list(node.output)})"
