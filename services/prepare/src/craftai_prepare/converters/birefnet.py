"""BiRefNet's torch routes (BiRefNet_lite, BiRefNet_HR): the published checkpoint read strictly,
its patch order proven.

The recipe's weights say which published configuration the checkpoint is (`architecture`: "lite",
the default, or "swin-l"), the square side it was trained at (`input_side`: 1024 unless given) and,
where a file stores its floats otherwise than its configuration publishes them (fp32 for lite, fp16
for Swin-L), how (`floats`: "float16" or "float32"); the checkpoint is read against that
configuration, every tensor by name, shape and dtype.

The network reads the picture's patches in one of two orders (craftai_models.birefnet.PatchOrder);
which one a checkpoint was trained with is not in the file. The recipe gives it as a setting of
the weights (`patch_order`). Where the recipe's published ONNX (the onnxruntime route's file, the
same checkpoint exported by its author) is on disk, this preparation proves the setting on the
real bytes: the checkpoint runs in both orders on a probe picture beside the graph; the order in
which it reproduces the graph, and the other order clearly does not, is the one it was trained
with. A checkpoint proven to read its patches in the other order than the recipe gives is refused,
in plain words, and so is one that reproduces the graph in neither order: it is not the graph's
checkpoint, so the torch route would not answer the recipe's model (the safetensors and the ONNX of
rembg's Swin-L recipes are separate publications of one training run). Where the probe cannot tell
the orders apart (both reproduce the graph), and where the ONNX is not on disk, the folder is
prepared with the recipe's order and says that it is unverified, and why (the route's status shows
it). So does a proof whose memory would not fit: BiRefNet_HR's runs a Swin-L network and its graph
at 2048² on the CPU, about 14 GiB.
A checkpoint of which no graph is published (BiRefNet_dynamic: its recipe checks it against no
file) is prepared with the recipe's order, dated from its release, and says so.

The prepared folder holds the checkpoint exactly as published (a hard link where possible) and how
it is read (`PREPARED_SETTINGS`: the patch order, the configuration, the input side): nothing is
converted, so the outputs' hashes are the pins' and the torch route still reads the published bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from craftai_models import imagenet
from craftai_models.birefnet import (
    PREPARED_SETTINGS,
    PREPARED_WEIGHTS,
    TRAINED_SIDE,
    Architecture,
    BiRefNet,
    PatchOrder,
    floats_named,
    load_birefnet,
    write_prepared,
)
from craftai_models.checkpoints import CheckpointRefusedError
from craftai_models.onnx_sessions import open_session
from craftai_prepare.converters import ConversionError, Converter, Inputs, Outcome, Step, place_copy

#: Bump whenever the prepared folder could change (part of the prepared revision).
CONVERTER_VERSION = 3

#: The revision the catalogue's torch route of birefnet-lite names (a test holds the two equal).
REVISION = f"birefnet-torch.{CONVERTER_VERSION}"

#: An order reproduces the graph when the checkpoint's logits, read in it, are within this share of
#: the graph's largest logit everywhere on the probe, and the other order misses by SEPARATION
#: times as much. fp32 on the CPU: the calibrated random fixture's own export differs from the
#: network by about 2e-3 (onnxruntime's fused kernels and its sampling in the deformable
#: convolutions, amplified by random weights), the other order by about 1 (docs/MATTE.md). An fp16
#: checkpoint beside its fp32 graph adds the rounding of its weights (about 5e-4 each).
LOGIT_RTOL = 5e-2
SEPARATION = 10.0

#: The proof runs the published graph and the checkpoint on the CPU at the graph's side; per input
#: pixel, their activations take about this much (BiRefNet_lite in torch, 1.25 GiB at 1024²; a
#: Swin-L graph of rembg's in onnxruntime, 3 GiB at 1024²: craftai_infer's routes measure both).
PROOF_BYTES_PER_PIXEL = {Architecture.LITE: 1400, Architecture.SWIN_L: 3072}

#: The proof runs only when its estimate is within this share of what the process may use: it is a
#: check worth having, not worth an out-of-memory kill (BiRefNet_HR's at 2048² needs about 14 GiB).
PROOF_SHARE = 0.5


def probe_picture(side: int) -> np.ndarray:
    """A deterministic picture with what a matte network reacts to (a subject-like disc and bar,
    soft gradients, a fine stripe texture, sensor-like noise), ImageNet-normalised: f32[1, 3, side,
    side]. Every patch of every grid differs from its neighbours, so the two orders feed the
    injection blocks different channels."""
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    rgb = np.stack([0.25 + 0.5 * x, 0.2 + 0.6 * y, 0.55 + 0.3 * np.sin(9 * np.pi * x * y)])
    disc = (x - 0.42) ** 2 + (y - 0.45) ** 2 < 0.22**2
    bar = (np.abs(x - 0.7) < 0.05) & (y > 0.2) & (y < 0.9)
    rgb[:, disc] = np.array([0.9, 0.75, 0.55], dtype=np.float32)[:, None]
    rgb[:, bar] = np.array([0.15, 0.2, 0.35], dtype=np.float32)[:, None]
    rgb += (np.floor(x * side / 3) % 2).astype(np.float32) * 0.08
    rgb += np.random.default_rng(232).normal(0.0, 0.02, rgb.shape).astype(np.float32)
    rgb = np.clip(rgb, 0.0, 1.0)
    mean = np.array(imagenet.MEAN, dtype=np.float32)[:, None, None]
    std = np.array(imagenet.STD, dtype=np.float32)[:, None, None]
    return np.ascontiguousarray(((rgb - mean) / std)[None], dtype=np.float32)


@dataclass(frozen=True)
class OrderProof:
    """How far the checkpoint, read in each order, is from the published graph on the probe (max
    |logit difference| / max |graph logit|)."""

    distance: dict[PatchOrder, float]

    def other(self, order: PatchOrder) -> PatchOrder:
        return next(o for o in PatchOrder if o is not order)

    def proves(self, order: PatchOrder) -> bool:
        """The checkpoint reproduces the graph in `order`, and clearly not in the other one."""
        mine, other = self.distance[order], self.distance[self.other(order)]
        return mine <= LOGIT_RTOL and other >= SEPARATION * mine

    def words(self) -> str:
        return ", ".join(f"{o.value} {d:.2g}" for o, d in self.distance.items())


def graph_logits(onnx_path: Path, side: int) -> tuple[np.ndarray, np.ndarray]:
    """The probe at the published graph's input side, which must be the recipe's, and the graph's
    logits on it."""
    session = open_session(onnx_path, "cpu")
    (first, *rest) = session.get_inputs()
    shape = list(first.shape)
    if rest or len(shape) != 4 or shape[1] != 3 or shape[2] != shape[3] or not isinstance(shape[2], int):
        names = [i.name for i in session.get_inputs()]
        raise ConversionError(f"the published ONNX takes {names} {shape}, not one (1, 3, S, S) picture")
    if shape[2] != side:
        raise ConversionError(f"the published ONNX takes {shape[2]}² pictures, not the {side}² the recipe gives")
    probe = probe_picture(side)
    (logits, *_rest) = session.run(None, {first.name: probe})
    return probe, np.asarray(logits, dtype=np.float32)


def network_logits(network: BiRefNet, probe: np.ndarray, orders: Sequence[PatchOrder]) -> dict[PatchOrder, np.ndarray]:
    """The network's logits on the probe, reading the patches in each order (the weights stay)."""
    found: dict[PatchOrder, np.ndarray] = {}
    x = torch.from_numpy(probe)
    kept = network.decoder.order
    try:
        for order in orders:
            network.decoder.order = order
            with torch.inference_mode():
                found[order] = network(x).numpy()
    finally:
        network.decoder.order = kept
    return found


def prove_order(network: BiRefNet, onnx_path: Path, side: int = TRAINED_SIDE) -> OrderProof:
    """Run the graph and the checkpoint in both orders on the probe; how far each order is."""
    probe, reference = graph_logits(onnx_path, side)
    ours = network_logits(network, probe, list(PatchOrder))
    scale = max(float(np.abs(reference).max()), 1e-6)
    distance = {}
    for order, logits in ours.items():
        if logits.shape != reference.shape:
            raise ConversionError(
                f"the published ONNX answers {list(reference.shape)}, the network {list(logits.shape)}"
            )
        distance[order] = float(np.abs(logits - reference).max()) / scale
    return OrderProof(distance)


def refusal(declared: PatchOrder, proof: OrderProof) -> str | None:
    """Why this checkpoint is not served as the recipe gives it, in plain words: the probe proves
    the other order, or neither order reproduces the graph (another checkpoint); None otherwise."""
    other = proof.other(declared)
    if all(d > LOGIT_RTOL for d in proof.distance.values()):
        return (
            f"the checkpoint reproduces the published ONNX in neither patch order (distance from the graph: "
            f"{proof.words()}, at most {LOGIT_RTOL:.2g} reproduces it): it is not the checkpoint of that graph, "
            "so this route would not answer the recipe's model; the recipe data must pin the checkpoint the "
            "graph was exported from"
        )
    if not proof.proves(other):
        return None
    return (
        f"the checkpoint reproduces the published ONNX only when it reads the picture's patches in the "
        f"{other.value} order, not in the {declared.value} order the recipe gives for it (distance from the "
        f"graph: {proof.words()}): its weights were trained with the {other.value} order, and read as the "
        f"recipe says its mattes would be wrong; the recipe data's patch_order for this file must be "
        f'"{other.value}"'
    )


def undecided(declared: PatchOrder, proof: OrderProof) -> str:
    """What the probe left unproven, in plain words ("" when it proved the recipe's order; a probe
    that proves neither order is a `refusal`)."""
    if proof.proves(declared):
        return ""
    return (
        f"its patch order ({declared.value}) is the recipe's, not proven on the file: the checkpoint reproduces "
        f"the published ONNX, but the probe did not tell the two orders apart (distance from the graph: "
        f"{proof.words()})"
    )


def _setting(inputs: Inputs, name: str, default: str) -> str:
    """An optional setting of the weights: the recipe gives it where it is not BiRefNet_lite's."""
    return inputs.settings.get("weights", {}).get(name, default)


def declared_architecture(inputs: Inputs) -> Architecture:
    """The published configuration the recipe gives for its checkpoint (BiRefNet_lite unless said)."""
    value = _setting(inputs, "architecture", Architecture.LITE.value)
    try:
        return Architecture(value)
    except ValueError:
        known = ", ".join(f'"{a.value}"' for a in Architecture)
        raise ConversionError(f"the recipe's architecture {value!r} is none of {known}") from None


def declared_side(inputs: Inputs) -> int:
    """The square input side the recipe gives for its checkpoint (the side it was trained at)."""
    value = _setting(inputs, "input_side", str(TRAINED_SIDE))
    if not value.isdigit() or int(value) <= 0 or int(value) % 32:
        raise ConversionError(f"the recipe's input_side {value!r} is not a positive multiple of 32")
    return int(value)


def declared_floats(inputs: Inputs, architecture: Architecture) -> torch.dtype:
    """How the recipe says its checkpoint stores its floats (as `architecture` publishes them unless said)."""
    value = _setting(inputs, "floats", "")
    if not value:
        return architecture.stored
    try:
        return floats_named(value)
    except ValueError as exc:
        raise ConversionError(f"the recipe's floats: {exc}") from None


def proof_bytes(
    architecture: Architecture, side: int, onnx_bytes: int, weights_bytes: int, floats: torch.dtype | None = None
) -> int:
    """An upper estimate of the proof's peak memory: the graph's weights and the checkpoint's in
    fp32, and the larger of the two runs' activations at the graph's side."""
    fp32 = weights_bytes * (4 // architecture.stored_as(floats).itemsize)
    return onnx_bytes + fp32 + PROOF_BYTES_PER_PIXEL[architecture] * side * side


def prepare(inputs: Inputs, out: Path, step: Step) -> Outcome:
    """Read the checkpoint strictly; where the published ONNX is at hand and the proof's memory
    fits, prove its patch order; publish the checkpoint as it is with how it is read."""
    value = inputs.setting("weights", "patch_order")
    try:
        declared = PatchOrder(value)
    except ValueError:
        known = ", ".join(f'"{o.value}"' for o in PatchOrder)
        raise ConversionError(f"the recipe's patch_order {value!r} is none of {known}") from None
    architecture, side = declared_architecture(inputs), declared_side(inputs)
    floats = declared_floats(inputs, architecture)
    weights = inputs.sources["weights"]
    step(f"reading the {architecture.value} checkpoint strictly")
    try:
        network = load_birefnet(weights, order=declared, architecture=architecture, floats=floats)
    except CheckpointRefusedError as exc:
        raise ConversionError(str(exc)) from exc
    onnx_path = inputs.references.get("network")
    verification: dict[str, float] = {}
    unverified = ""
    limit, source = inputs.memory_limit()
    needed = (
        0
        if onnx_path is None
        else proof_bytes(architecture, side, onnx_path.stat().st_size, weights.stat().st_size, floats)
    )
    if onnx_path is None and not inputs.checks:
        unverified = (
            f"its patch order ({declared.value}) is the recipe's, dated from the checkpoint's release: no graph of "
            "this checkpoint is published to prove it against"
        )
        step("no published graph of this checkpoint to check the patch order against")
    elif onnx_path is None:
        unverified = (
            f"its patch order ({declared.value}) is the recipe's, not proven on the file: the published ONNX "
            "it is checked against was not on disk"
        )
        step("no published ONNX on disk to check the patch order against")
    elif needed > PROOF_SHARE * limit:
        unverified = (
            f"its patch order ({declared.value}) is the recipe's, not proven on the file: the proof against the "
            f"published ONNX at {side}² would hold about {needed / 2**30:.0f} GiB, more than {PROOF_SHARE:.0%} of "
            f"the {limit / 2**30:.0f} GiB this process may use ({source}); prepare it where more memory is "
            "available to have it proven"
        )
        step(f"not proving the patch order: the proof at {side}² needs about {needed / 2**30:.0f} GiB")
    else:
        step(f"proving the {declared.value} patch order against the published ONNX on a probe at {side}²")
        proof = prove_order(network, onnx_path, side)
        why = refusal(declared, proof)
        if why is not None:
            raise ConversionError(why)
        unverified = undecided(declared, proof)
        verification = {f"logits_rdiff_{o.value.replace('-', '_')}": d for o, d in proof.distance.items()}
    del network
    step("publishing the checkpoint with its patch order")
    place_copy(weights, out / PREPARED_WEIGHTS)
    write_prepared(out / PREPARED_SETTINGS, declared, architecture, side, floats)
    return Outcome(verification, unverified)


CONVERTER = Converter(REVISION, prepare, steps=4)

__all__ = [
    "CONVERTER",
    "CONVERTER_VERSION",
    "LOGIT_RTOL",
    "PROOF_BYTES_PER_PIXEL",
    "PROOF_SHARE",
    "REVISION",
    "SEPARATION",
    "OrderProof",
    "declared_architecture",
    "declared_floats",
    "declared_side",
    "network_logits",
    "prepare",
    "probe_picture",
    "proof_bytes",
    "prove_order",
    "refusal",
    "undecided",
]
