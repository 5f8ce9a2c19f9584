"""SAM 2.1 graphs, step 2b: the recognised operations matched against the layout, into a state_dict.

The layers are matched one to one in the order the network runs them (`layout`), the other
patterns by kind and count, checking every shape against the network, conv strides/padding,
LayerNorm epsilons, and, where an initializer still carries a name and feeds one node only, that
the name is the expected parameter's. Anything else, such as a weight the layout has no place for
or a missing one, raises `GraphMismatchError`, whose plain message names the node.

The decoder's dense positional encoding is constant-folded: it is computed from the Fourier
matrix over a folded [64,64,2] grid (the cell centres, already mapped to [-1, 1]); the grid is
checked against the one the network computes. The neck's sine encoding is dead code in the
encoder graph (ignored).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import torch

from craftai_models.sam2.contract import DECODER_INPUTS, DECODER_OUTPUTS, ENCODER_INPUTS, ENCODER_OUTPUTS
from craftai_models.sam2.hiera import HieraConfig
from craftai_models.sam2.model import Sam2ImageModel
from craftai_prepare.converters.sam21.layout import (
    DECODER_SINGLETONS,
    ENCODER_SINGLETONS,
    FOURIER_KEY,
    LABEL_KEYS,
    LAYER_KINDS,
    Expect,
    decoder_layout,
    encoder_layout,
)
from craftai_prepare.converters.sam21.ops import GraphMismatchError, Op, SamGraph, derives_from, is_float, scan


class _Assembler:
    """Collects converted tensors, checking each against the network's parameter of that name."""

    def __init__(self, g: SamGraph, reference: Sam2ImageModel) -> None:
        self.g = g
        self.reference = reference
        self.expected = reference.state_dict()
        self.out: dict[str, torch.Tensor] = {}
        self.used: set[str] = set()
        self.seen: set[str] = set()  # roles of singleton patterns already placed

    def put(self, op: Op, key: str, value: np.ndarray, source: str | None) -> None:
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

    def _check_name(self, op: Op, key: str, source: str) -> None:
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


def _match(
    g: SamGraph, ops: list[Op], layout: Sequence[Expect], singletons: Mapping[str, int], reference: Sam2ImageModel
) -> _Assembler:
    """Layers one to one in the order the network runs them; the other patterns by kind and count.

    The layers of one part form a dependency chain, so every exporter writes them in that order;
    the singletons (tables, tokens, embeddings) may come wherever the wrapper happened to compute
    them (the dense positional encoding before or after the prompts, for instance).
    """
    asm = _Assembler(g, reference)
    layers = [op for op in ops if op.kind in LAYER_KINDS]
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
            _HANDLERS[kind](asm, op, Expect(kind, kind))
    stray = [op for op in ops if op.kind not in LAYER_KINDS and op.kind not in singletons]
    if stray:
        raise g.error(stray[0].node, f"a {stray[0].kind} pattern that belongs to the other file")
    unused = [
        name
        for name, value in g.initializers.items()
        if name not in asm.used and is_float(value) and value.size > 1 and g.consumers.get(name)
    ]
    if unused:
        node = g.consumers[unused[0]][0]
        raise g.error(node, f"weights the network has no place for: {', '.join(sorted(unused)[:5])}")
    return asm


def _put_weight_bias(asm: _Assembler, op: Op, expect: Expect) -> None:
    for role in ("weight", "bias"):
        if role not in op.tensors:
            raise asm.g.error(op.node, f"'{expect.key}' has no {role} in the graph")
        asm.put(op, f"{expect.key}.{role}", op.tensors[role], op.sources.get(role))


def _handle_conv(asm: _Assembler, op: Op, expect: Expect) -> None:
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


def _handle_layer_norm(asm: _Assembler, op: Op, expect: Expect) -> None:
    module = asm.reference.get_submodule(expect.key)
    assert isinstance(module, torch.nn.LayerNorm)
    eps = float(op.info["eps"])
    if not math.isclose(eps, module.eps, rel_tol=1e-4) or op.info["axis"] != -1:
        raise asm.g.error(op.node, f"'{expect.key}' should normalise the last axis with eps {module.eps}, got {eps}")
    _put_weight_bias(asm, op, expect)


def _handle_layer_norm_2d(asm: _Assembler, op: Op, expect: Expect) -> None:
    # folded [C, 1, 1] -> [C]
    for role in ("weight", "bias"):
        asm.put(op, f"{expect.key}.{role}", op.tensors[role].reshape(-1), op.sources[role])


def _handle_fourier(asm: _Assembler, op: Op, expect: Expect) -> None:
    """Two uses of the Fourier matrix: the prompt points, and the grid of the dense encoding."""
    asm.put(op, FOURIER_KEY, op.tensors["matrix"], op.sources["matrix"])
    grid = op.info["grid"]
    role = "grid" if grid is not None else "points"
    if role in asm.seen:
        raise asm.g.error(op.node, f"a second Fourier encoding of the {role}")
    asm.seen.add(role)
    if grid is None and not derives_from(asm.g, op.node.input[0], "point_coords", depth=12):
        raise asm.g.error(op.node, "a Fourier encoding of something other than point_coords or a fixed grid")
    if grid is not None:
        h, w = asm.reference.prompt_encoder.image_embedding_size
        ys, xs = (np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w
        centres = np.stack(np.meshgrid(xs, ys), axis=-1)  # [h, w, (x, y)] in [0, 1]
        folded = (2 * centres - 1).astype(np.float32)  # the encoding maps [0, 1] to [-1, 1] first
        if not isinstance(grid, np.ndarray) or grid.shape != folded.shape or not np.allclose(grid, folded, atol=1e-6):
            raise asm.g.error(op.node, f"the dense positional encoding is not taken at the {h}x{w} cell centres")


def _handle_label_embedding(asm: _Assembler, op: Op, expect: Expect) -> None:
    label = int(op.info["label"])
    if label not in LABEL_KEYS:
        raise asm.g.error(op.node, f"an embedding for point label {label}; the network knows -1, 0, 1, 2, 3")
    key = LABEL_KEYS[label]
    if key in asm.out:
        raise asm.g.error(op.node, f"a second embedding for point label {label}")
    asm.put(op, key, op.tensors["embed"], op.sources["embed"])


def _handle_no_mask(asm: _Assembler, op: Op, expect: Expect) -> None:
    asm.put(op, "prompt_encoder.no_mask_embed.weight", op.tensors["embed"].reshape(1, -1), op.sources["embed"])


def _handle_tokens(asm: _Assembler, op: Op, expect: Expect) -> None:
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


def _handle_position_embedding(asm: _Assembler, op: Op, expect: Expect) -> None:
    trunk = "image_encoder.trunk"
    asm.put(op, f"{trunk}.pos_embed", op.tensors["background"], op.sources["background"])
    asm.put(op, f"{trunk}.pos_embed_window", op.tensors["window"], op.sources["window"])


def _handle_no_mem(asm: _Assembler, op: Op, expect: Expect) -> None:
    asm.put(op, "no_mem_embed", op.tensors["embed"], op.sources["embed"])


_HANDLERS: dict[str, Callable[[_Assembler, Op, Expect], None]] = {
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


# -- the two files -> the state_dict ------------------------------------------------------------------


def _check_signature(g: SamGraph, inputs: Sequence[str], outputs: Sequence[str]) -> None:
    got_in = tuple(i.name for i in g.inputs())
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
    g = SamGraph(model, "encoder.onnx")
    _check_signature(g, ENCODER_INPUTS, ENCODER_OUTPUTS)
    return _match(g, scan(g), encoder_layout(HieraConfig()), ENCODER_SINGLETONS, _reference_network()).out


def convert_decoder(model: onnx.ModelProto) -> dict[str, torch.Tensor]:
    """decoder.onnx -> the prompt encoder's and mask decoder's weights (network keys)."""
    g = SamGraph(model, "decoder.onnx")
    _check_signature(g, DECODER_INPUTS, DECODER_OUTPUTS)
    return _match(g, scan(g), decoder_layout(), DECODER_SINGLETONS, _reference_network()).out


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
