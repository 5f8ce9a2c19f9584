"""BiRefNet_lite's torch route: the published checkpoint read strictly, its patch order proven.

The network reads the picture's patches in one of two orders (craftai_models.birefnet.PatchOrder);
which one a checkpoint was trained with is not in the file. The recipe gives it as a setting of
the weights (`patch_order`). Where the recipe's published ONNX (the onnxruntime route's file, the
same checkpoint exported by its author) is on disk, this preparation proves the setting on the
real bytes: the checkpoint runs in both orders on a probe picture beside the graph; the order in
which it reproduces the graph, and the other order clearly does not, is the one it was trained
with. A checkpoint proven to read its patches in the other order than the recipe gives is refused,
in plain words. Where the probe cannot tell (neither order reproduces the graph, or both do), and
where the ONNX is not on disk, the folder is prepared with the recipe's order and says that it is
unverified, and why (the route's status shows it).

The prepared folder holds the checkpoint exactly as published (a hard link where possible) and the
order it is read with (`PREPARED_SETTINGS`): nothing is converted, so the outputs' hashes are the
pins' and the torch route still reads the published bytes.
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
    BiRefNet,
    PatchOrder,
    load_birefnet,
    write_patch_order,
)
from craftai_models.checkpoints import CheckpointRefusedError
from craftai_models.onnx_sessions import open_session
from craftai_prepare.converters import ConversionError, Converter, Inputs, Outcome, Step, place_copy

#: Bump whenever the prepared folder could change (part of the prepared revision).
CONVERTER_VERSION = 1

#: The revision the catalogue's torch route of birefnet-lite names (a test holds the two equal).
REVISION = f"birefnet-torch.{CONVERTER_VERSION}"

#: An order reproduces the graph when the checkpoint's logits, read in it, are within this share of
#: the graph's largest logit everywhere on the probe, and the other order misses by SEPARATION
#: times as much. fp32 on the CPU: the calibrated random fixture's own export differs from the
#: network by about 2e-3 (onnxruntime's fused kernels and its sampling in the deformable
#: convolutions, amplified by random weights), the other order by about 1 (docs/MATTE.md).
LOGIT_RTOL = 5e-2
SEPARATION = 10.0


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


def graph_logits(onnx_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The probe at the published graph's own input side, and the graph's logits on it."""
    session = open_session(onnx_path, "cpu")
    (first, *rest) = session.get_inputs()
    shape = list(first.shape)
    if rest or len(shape) != 4 or shape[1] != 3 or shape[2] != shape[3] or not isinstance(shape[2], int):
        names = [i.name for i in session.get_inputs()]
        raise ConversionError(f"the published ONNX takes {names} {shape}, not one (1, 3, S, S) picture")
    if shape[2] % 32:
        raise ConversionError(f"the published ONNX takes {shape[2]}² pictures, not a multiple of 32")
    probe = probe_picture(int(shape[2]))
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


def prove_order(network: BiRefNet, onnx_path: Path) -> OrderProof:
    """Run the graph and the checkpoint in both orders on the probe; how far each order is."""
    probe, reference = graph_logits(onnx_path)
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
    """Why the recipe's order is wrong for this checkpoint, in plain words; None unless the probe
    proves the other order."""
    other = proof.other(declared)
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
    """What the probe left unproven, in plain words ("" when it proved the recipe's order)."""
    if proof.proves(declared):
        return ""
    return (
        f"its patch order ({declared.value}) is the recipe's, not proven on the file: the probe did not "
        f"tell the two orders apart against the published ONNX (distance from the graph: {proof.words()})"
    )


def prepare(inputs: Inputs, out: Path, step: Step) -> Outcome:
    """Read the checkpoint strictly; where the published ONNX is at hand, prove its patch order;
    publish the checkpoint as it is with its order."""
    value = inputs.setting("weights", "patch_order")
    try:
        declared = PatchOrder(value)
    except ValueError:
        known = ", ".join(f'"{o.value}"' for o in PatchOrder)
        raise ConversionError(f"the recipe's patch_order {value!r} is none of {known}") from None
    weights = inputs.sources["weights"]
    step("reading the checkpoint strictly")
    try:
        network = load_birefnet(weights, order=declared)
    except CheckpointRefusedError as exc:
        raise ConversionError(str(exc)) from exc
    onnx_path = inputs.references.get("network")
    verification: dict[str, float] = {}
    unverified = ""
    if onnx_path is None:
        unverified = (
            f"its patch order ({declared.value}) is the recipe's, not proven on the file: the published ONNX "
            "it is checked against was not on disk"
        )
        step("no published ONNX on disk to check the patch order against")
    else:
        step(f"proving the {declared.value} patch order against the published ONNX on a probe")
        proof = prove_order(network, onnx_path)
        why = refusal(declared, proof)
        if why is not None:
            raise ConversionError(why)
        unverified = undecided(declared, proof)
        verification = {f"logits_rdiff_{o.value.replace('-', '_')}": d for o, d in proof.distance.items()}
    del network
    step("publishing the checkpoint with its patch order")
    place_copy(weights, out / PREPARED_WEIGHTS)
    write_patch_order(out / PREPARED_SETTINGS, declared)
    return Outcome(verification, unverified)


CONVERTER = Converter(REVISION, prepare, steps=4)

__all__ = [
    "CONVERTER",
    "CONVERTER_VERSION",
    "LOGIT_RTOL",
    "REVISION",
    "SEPARATION",
    "OrderProof",
    "network_logits",
    "prepare",
    "probe_picture",
    "prove_order",
    "refusal",
    "undecided",
]
