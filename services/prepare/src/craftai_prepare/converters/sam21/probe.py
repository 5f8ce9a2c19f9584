"""SAM 2.1 conversion, step 3: the converted network against the ONNX files on a fixed probe.

`verify_conversion` runs the converted network (torch) and the published graphs (onnxruntime,
CPU) through the same chain, a deterministic picture then four prompts, the last one fed back
the engine's own best mask, and reports the differences against the tolerances below.
`probe_network` takes a device, autocast and a memory layout, so that the GPU check
(tools/gpu/sam2_check.py) holds other precisions to the same probe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from craftai_models import imagenet
from craftai_models.onnx_sessions import open_session
from craftai_models.sam2.contract import DECODER_INPUTS, DECODER_OUTPUTS, ENCODER_OUTPUTS
from craftai_models.sam2.model import Sam2ImageModel, build_sam21_tiny

# Probe tolerances, fp32 on the CPU (this network in torch vs the ONNX files in onnxruntime). Both
# run the same arithmetic; the margins cover different kernels and thread counts (measured: about
# 1e-5 on logits of magnitude up to 32 with random weights).
PROBE_FEATURE_ATOL = 1e-3  # max abs diff on encoder outputs
PROBE_LOGIT_ATOL = 1e-3  # max abs diff on low-res mask logits
PROBE_MASK_IOU_MIN = 0.999  # IoU of the (logits > 0) masks, per mask
PROBE_IOU_PRED_ATOL = 1e-4  # max abs diff on predicted IoUs


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
    encoder = open_session(encoder_path, "cpu", intra_op_threads=threads)
    decoder = open_session(decoder_path, "cpu", intra_op_threads=threads)

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
