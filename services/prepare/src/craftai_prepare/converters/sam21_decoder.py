"""SAM 2 / 2.1 tiny on onnxruntime: the published decoder with Meta's single-mask token as outputs.

The published decoder (samexporter contract, docs/research/sam21.md) computes all four mask tokens
and their predicted IoUs, then slices token 0, the single-mask answer, off both (`masks[:, 1:]`,
`iou_predictions[:, 1:]`) and clamps the masks to ±32. Its weights are all there; only the outputs
are missing. This preparation edits a copy of the graph: it follows each published output back to
the Slice that drops token 0, and adds beside it the same slice of token 0 (then the same clamp),
as two more outputs, `single_mask` [L, 1, 256, 256] and `single_iou_prediction` [L, 1]. Nothing
else changes: the published outputs are computed by the same nodes.

It checks itself before anything is written, on probe prompts through onnxruntime (CPU): the edited
graph's published outputs are bit for bit the published graph's; the tensor each new output is
sliced from has four tokens, tokens 1-3 of it (clamped) are the published outputs bit for bit, and
the new outputs are its token 0 (clamped), distinct from the three.

The prepared folder holds the encoder as published (a hard link where possible) and the edited
decoder (craftai_models.sam2.contract names both). A decoder whose outputs are not made that way
(no such Slice) is published unedited, and the route's status says that Meta's single mask is not
offered on it; the onnxruntime route reads the outputs its decoder has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from craftai_models.onnx_sessions import open_session
from craftai_models.sam2.contract import (
    DECODER_INPUTS,
    DECODER_OUTPUTS,
    DECODER_SINGLE_OUTPUTS,
    LOW_RES,
    PREPARED_DECODER,
    PREPARED_ENCODER,
)
from craftai_prepare.converters import ConversionError, Converter, Inputs, Outcome, Step, place_copy
from craftai_prepare.onnx_graph import OnnxGraph, describe

#: Bump whenever the prepared folder could change (part of the prepared revision).
CONVERTER_VERSION = 1

#: The revision the catalogue's onnxruntime routes of the SAM 2 / 2.1 tiny recipes name.
REVISION = f"sam21-onnx.{CONVERTER_VERSION}"

TOKENS = 4  # the mask decoder's tokens: 0 the single-mask answer, 1-3 the multimask ones
# Elementwise nodes an exporter may put between the Slice and a published output (the clamp).
CLAMP_OPS = frozenset({"Clip", "Min", "Max", "Identity"})
# The token axis of each published output, as an exporter may write it (masks [L, 3, h, w], IoUs [L, 3]).
TOKEN_AXES = {DECODER_OUTPUTS[0]: ([1], [-3]), DECODER_OUTPUTS[1]: ([1], [-1])}


class NotRecognisedError(ValueError):
    """The decoder's outputs are not made by slicing token 0 off: the graph cannot be edited."""


@dataclass(frozen=True)
class Sliced:
    """How the graph makes one published output: `source` (all four tokens) sliced from token 1 on
    along axis 1, then the `chain` of elementwise nodes (nearest the output first)."""

    output: str
    source: str
    chain: list[onnx.NodeProto]


def _ints(g: OnnxGraph, name: str) -> list[int] | None:
    value = g.constant(name) if name else None
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def find_slice(g: OnnxGraph, output: str) -> Sliced:
    """The Slice that drops token 0 before `output`, through elementwise nodes; NotRecognisedError
    in plain words where the graph makes the output another way."""
    name, chain = g.behind(output, CLAMP_OPS)
    node = g.producers.get(name)
    if node is None or node.op_type != "Slice":
        made = "a graph input" if node is None else describe(node)
        raise NotRecognisedError(f"the decoder's {output!r} is made by {made}, not by slicing the mask tokens")
    for extra in chain:
        if any(g.constant(i) is None for i in extra.input[1:] if i):
            raise NotRecognisedError(f"{describe(extra)} before {output!r} takes a computed value")
    starts, ends = _ints(g, node.input[1]), _ints(g, node.input[2])
    axes = _ints(g, node.input[3]) if len(node.input) > 3 else [0]
    steps = _ints(g, node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
    if starts != [1] or axes not in TOKEN_AXES[output] or steps != [1]:
        raise NotRecognisedError(
            f"{describe(node)} before {output!r} is not a slice of tokens 1 on (starts {starts}, axes {axes}, "
            f"steps {steps})"
        )
    if ends is None or ends[0] < TOKENS:
        raise NotRecognisedError(f"{describe(node)} before {output!r} does not slice to the last token (ends {ends})")
    return Sliced(output, node.input[0], chain)


def _token_zero(model: onnx.ModelProto, sliced: Sliced, out: str, tag: str) -> None:
    """Nodes that make `out` from token 0 of `sliced.source` the way the graph makes the published
    output from tokens 1-3 (the same slice from 0 to 1, then the same chain of nodes)."""
    graph = model.graph
    consts = {
        f"craftai_{tag}_starts": [0],
        f"craftai_{tag}_ends": [1],
        f"craftai_{tag}_axes": [1],
    }
    for name, values in consts.items():
        graph.initializer.append(helper.make_tensor(name, onnx.TensorProto.INT64, [1], values))
    current = f"craftai_{tag}_token0"
    graph.node.append(helper.make_node("Slice", [sliced.source, *consts], [current], name=f"craftai_{tag}_slice"))
    for i, node in enumerate(reversed(sliced.chain)):
        made = out if i == len(sliced.chain) - 1 else f"craftai_{tag}_{i}"
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"craftai_{tag}_{node.op_type.lower()}_{i}"
        copy.input[0] = current
        del copy.output[:]
        copy.output.append(made)
        graph.node.append(copy)
        current = made
    if not sliced.chain:
        graph.node.append(helper.make_node("Identity", [current], [out], name=f"craftai_{tag}_out"))


def edit(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Sliced]]:
    """A copy of the decoder with `DECODER_SINGLE_OUTPUTS` added (NotRecognisedError when it cannot)."""
    g = OnnxGraph(model)
    outputs = [o.name for o in model.graph.output]
    if tuple(outputs) != DECODER_OUTPUTS:
        raise NotRecognisedError(
            f"the decoder answers {outputs}, not the samexporter contract's {list(DECODER_OUTPUTS)}"
        )
    found = [find_slice(g, name) for name in DECODER_OUTPUTS]
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    for sliced, out, tag in zip(found, DECODER_SINGLE_OUTPUTS, ("mask", "iou"), strict=True):
        _token_zero(edited, sliced, out, tag)
        edited.graph.output.append(helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
    return edited, found


def probe_feeds() -> list[dict[str, np.ndarray]]:
    """Decoder inputs for the check: seeded image features and prompts of every kind (one click,
    clicks in and out, a box, a box with a click and a previous mask)."""
    rng = np.random.default_rng(21)
    features = {
        "image_embed": rng.normal(0, 1, (1, 256, 64, 64)),
        "high_res_feats_0": rng.normal(0, 1, (1, 32, 256, 256)),
        "high_res_feats_1": rng.normal(0, 1, (1, 64, 128, 128)),
    }
    prompts = [
        ([(358.0, 410.0)], [1.0], None),
        ([(358.0, 410.0), (720.0, 690.0), (100.0, 900.0)], [1.0, 0.0, 0.0], None),
        ([(560.0, 560.0), (870.0, 820.0)], [2.0, 3.0], None),
        ([(560.0, 560.0), (870.0, 820.0), (700.0, 680.0)], [2.0, 3.0, 1.0], rng.normal(0, 4, (1, 1, LOW_RES, LOW_RES))),
    ]
    feeds = []
    for points, labels, mask in prompts:
        feeds.append(
            {
                **features,
                "point_coords": np.array([points], np.float32),
                "point_labels": np.array([labels], np.float32),
                "mask_input": np.zeros((1, 1, LOW_RES, LOW_RES)) if mask is None else mask,
                "has_mask_input": np.array([0.0 if mask is None else 1.0]),
            }
        )
    return [{k: np.ascontiguousarray(v, dtype=np.float32) for k, v in f.items()} for f in feeds]


def _replay(chain: list[onnx.NodeProto], g: OnnxGraph, x: np.ndarray) -> np.ndarray:
    """The elementwise chain applied in numpy (only the clamps an exporter writes)."""
    for node in reversed(chain):
        bounds = [g.constant(i) if i else None for i in node.input[1:]]
        if node.op_type == "Clip":
            low = bounds[0] if bounds else None
            high = bounds[1] if len(bounds) > 1 else None
            x = np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)
        elif node.op_type == "Min":
            x = np.minimum(x, *[b for b in bounds if b is not None])
        elif node.op_type == "Max":
            x = np.maximum(x, *[b for b in bounds if b is not None])
    return x.astype(np.float32)


def check(published: onnx.ModelProto, edited: onnx.ModelProto, found: list[Sliced]) -> dict[str, float]:
    """The self-check on the probe (ConversionError in plain words when any part fails)."""
    g = OnnxGraph(published)
    probing = onnx.ModelProto()
    probing.CopyFrom(edited)
    for sliced in found:  # the tensors the outputs are sliced from, for the check only
        probing.graph.output.append(helper.make_tensor_value_info(sliced.source, onnx.TensorProto.FLOAT, None))
    before = open_session(published.SerializeToString(), "cpu", intra_op_threads=2)
    after = open_session(probing.SerializeToString(), "cpu", intra_op_threads=2)
    names = [*DECODER_OUTPUTS, *DECODER_SINGLE_OUTPUTS, *(s.source for s in found)]
    feeds = probe_feeds()
    for i, feed in enumerate(feeds):
        inputs = {k: feed[k] for k in DECODER_INPUTS}
        old = dict(zip(DECODER_OUTPUTS, before.run(list(DECODER_OUTPUTS), inputs), strict=True))
        new = dict(zip(names, after.run(names, inputs), strict=True))
        for name in DECODER_OUTPUTS:
            if not np.array_equal(old[name], new[name]):
                raise ConversionError(f"probe {i}: the edited decoder's {name!r} differs from the published one")
        for sliced, single in zip(found, DECODER_SINGLE_OUTPUTS, strict=True):
            tokens = np.asarray(new[sliced.source])
            if tokens.ndim < 2 or tokens.shape[1] != TOKENS:
                raise ConversionError(
                    f"probe {i}: {sliced.source!r} has shape {list(tokens.shape)}, not {TOKENS} tokens"
                )
            if not np.array_equal(_replay(sliced.chain, g, tokens[:, 1:]), old[sliced.output]):
                raise ConversionError(
                    f"probe {i}: tokens 1-3 of {sliced.source!r} are not the published {sliced.output!r}"
                )
            zero = _replay(sliced.chain, g, tokens[:, :1])
            if not np.array_equal(zero, new[single]):
                raise ConversionError(f"probe {i}: {single!r} is not token 0 of {sliced.source!r}")
            rest = old[sliced.output]
            if any(np.array_equal(zero[:, 0], rest[:, k]) for k in range(rest.shape[1])):
                raise ConversionError(f"probe {i}: {single!r} repeats one of the multimask outputs")
    # Bit for bit: the published outputs did not move, the new ones are token 0 exactly.
    return {"probes": float(len(feeds)), "published_outputs_max_abs": 0.0, "token0_max_abs": 0.0}


def prepare(inputs: Inputs, out: Path, step: Step) -> Outcome:
    """Edit the decoder (checked), publish it beside the encoder as published."""
    step("reading the published decoder graph")
    try:
        published = onnx.load(str(inputs.sources["decoder"]))
    except DecodeError as exc:
        raise ConversionError(f"the decoder file is not an ONNX graph ({exc})") from exc
    try:
        edited, found = edit(published)
    except NotRecognisedError as exc:
        step("publishing the graphs as they are")
        place_copy(inputs.sources["encoder"], out / PREPARED_ENCODER)
        place_copy(inputs.sources["decoder"], out / PREPARED_DECODER)
        return Outcome({}, f"Meta's single mask (single_mask_like_meta) is not offered on it: {exc}")
    step("checking the edited decoder against the published one on probe prompts")
    verification = check(published, edited, found)
    step("writing the edited decoder beside the published encoder")
    place_copy(inputs.sources["encoder"], out / PREPARED_ENCODER)
    (out / PREPARED_DECODER).write_bytes(edited.SerializeToString())
    return Outcome(verification)


CONVERTER = Converter(REVISION, prepare, steps=4)

__all__ = [
    "CONVERTER",
    "CONVERTER_VERSION",
    "REVISION",
    "NotRecognisedError",
    "Sliced",
    "check",
    "edit",
    "find_slice",
    "prepare",
    "probe_feeds",
]
