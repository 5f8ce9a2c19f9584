"""SAM 2.1 hiera tiny: recover the PyTorch network's weights from the published samexporter ONNX pair.

The legacy (TorchScript) exporter does not keep a state_dict: it transposes Linear weights into
anonymous `MatMul` initializers, folds LayerNorm2d parameters to [C,1,1], concatenates the decoder's
output tokens into one [1,6,256] constant, reshapes `no_mask_embed` to [1,256,1,1], merges
identical tensors into one shared initializer, and drops what the graph never uses (the
object-score head). Names therefore cannot be trusted, so this converter follows the graph instead:

1. `ops`: it scans the nodes in their stored (topological, i.e. trace) order and recognises each
   parametrised operation by its pattern.
2. `layout` and `assembly`: it matches that sequence one to one against the order in which the
   network runs its layers, and the other patterns (which an exporter may write anywhere) by kind
   and count, checking every shape against the network; anything else raises
   `GraphMismatchError`, whose plain message names the node.
3. `probe`: it runs the converted network and the ONNX files (onnxruntime, CPU) on a fixed probe
   and holds the differences to stated tolerances before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from craftai_models.sam2.contract import WEIGHTS
from craftai_prepare.converters import ConversionError, Converter, Step, own_files_only, write_weights
from craftai_prepare.converters.sam21.assembly import convert, convert_decoder, convert_encoder, load_onnx
from craftai_prepare.converters.sam21.ops import GraphMismatchError
from craftai_prepare.converters.sam21.probe import (
    FP32,
    PROBE_FEATURE_ATOL,
    PROBE_IOU_PRED_ATOL,
    PROBE_LOGIT_ATOL,
    PROBE_MASK_IOU_MIN,
    PROBE_PROMPTS,
    DecodeFn,
    EncodeFn,
    Features,
    ProbeOutputs,
    ProbeReport,
    PromptResult,
    Tolerances,
    compare_probe,
    probe_image,
    probe_network,
    probe_onnxruntime,
    run_probe,
    verify_conversion,
)

#: Bump whenever the converter's output could change (part of the prepared revision).
CONVERTER_VERSION = 1

#: The revision the catalogue's torch routes of the SAM 2 / 2.1 tiny recipes name (a test holds them equal).
REVISION = f"sam21-torch.{CONVERTER_VERSION}"


def prepare(sources: Mapping[str, Path], out: Path, step: Step) -> dict[str, float]:
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
    write_weights(out / WEIGHTS, state_dict)
    return {
        "feature_max_abs": report.feature_max,
        "logits_max_abs": report.logits_max_abs,
        "mask_iou_min": report.mask_iou_min,
        "iou_pred_max_abs": report.iou_pred_max_abs,
    }


CONVERTER = Converter(REVISION, own_files_only(prepare), steps=4)

__all__ = [
    "CONVERTER",
    "CONVERTER_VERSION",
    "FP32",
    "PROBE_FEATURE_ATOL",
    "PROBE_IOU_PRED_ATOL",
    "PROBE_LOGIT_ATOL",
    "PROBE_MASK_IOU_MIN",
    "PROBE_PROMPTS",
    "REVISION",
    "DecodeFn",
    "EncodeFn",
    "Features",
    "GraphMismatchError",
    "ProbeOutputs",
    "ProbeReport",
    "PromptResult",
    "Tolerances",
    "compare_probe",
    "convert",
    "convert_decoder",
    "convert_encoder",
    "load_onnx",
    "prepare",
    "probe_image",
    "probe_network",
    "probe_onnxruntime",
    "run_probe",
    "verify_conversion",
]
