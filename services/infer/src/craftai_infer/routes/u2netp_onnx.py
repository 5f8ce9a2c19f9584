"""rembg's U²-Net family for image.matte on onnxruntime (u2netp, u2net, u2net_human_seg, silueta):
the published ONNX run as published, with the rembg-compatible pipeline
(craftai_infer.pipelines.matte_u2netp), which rembg applies to all four alike.

`U2netpGraph` is the route on any engine that runs the published graph itself (this one, and
OpenVINO: routes/u2netp_openvino.py); only the model that runs the network differs."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from craftai_infer.engines.onnxruntime import OnnxModel
from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import Capabilities, MatteRoute, ModelRefusedError, RouteFiles

# What the pipeline feeds and reads: one picture, and the fused map first (sigmoid applied).
INPUT_SHAPE = [1, 3, matte_u2netp.SIZE, matte_u2netp.SIZE]
FUSED_SHAPE = [1, 1, matte_u2netp.SIZE, matte_u2netp.SIZE]


def check_contract(inputs: Sequence[Sequence[object]], outputs: Sequence[Sequence[object]]) -> None:
    """The graph's shapes are those of the rembg files: a graph of another contract is refused when
    the route loads it, in words, rather than answering nonsense (a dimension the graph leaves named
    is taken as it comes)."""

    def fits(shape: Sequence[object], expected: list[int]) -> bool:
        return len(shape) == len(expected) and all(
            not isinstance(d, int) or d == e for d, e in zip(shape, expected, strict=True)
        )

    if len(inputs) != 1 or not fits(inputs[0], INPUT_SHAPE):
        raise ModelRefusedError(f"the graph's inputs are {[list(i) for i in inputs]}, not one {INPUT_SHAPE} picture")
    if not outputs or not fits(outputs[0], FUSED_SHAPE):
        first = list(outputs[0]) if outputs else "none"
        raise ModelRefusedError(f"the graph's first output is {first}, not the {FUSED_SHAPE} fused map")


class GraphModel(Protocol):
    """An engine's model of the published graph: named inputs in, every output out, in order."""

    device: str
    input_names: list[str]

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...


class U2netpGraph(MatteRoute):
    """The published graph takes one picture at a time; `concurrent_runs` pictures may run at once."""

    def __init__(self, model: GraphModel, concurrent_runs: int) -> None:
        self.model = model
        self.device = model.device
        self.input_name = model.input_names[0]
        self.capabilities = Capabilities(concurrent_runs=concurrent_runs)
        self._scratch = threading.local()  # a matte_u2netp.Scratch per thread that runs pictures

    def matte(self, pictures: Sequence[Picture]) -> list[npt.NDArray[np.uint8]]:
        """Host arrays: the pipeline's post-processing is Pillow's (rembg's)."""
        return [self._matte(picture) for picture in pictures]

    def _matte(self, picture: Picture) -> npt.NDArray[np.uint8]:
        scratch = getattr(self._scratch, "arrays", None)
        if scratch is None:
            scratch = self._scratch.arrays = matte_u2netp.Scratch()
        (fused, *_sides) = self.model.run({self.input_name: matte_u2netp.preprocess(picture, scratch)})
        height, width = picture.shape[:2]
        return matte_u2netp.postprocess(fused, (width, height))


class U2netpOnnx(U2netpGraph):
    """onnxruntime: byte-identical to rembg's matte on the same file (the default engine)."""

    model: OnnxModel

    def __init__(self, files: RouteFiles, device: str) -> None:
        model = OnnxModel(files.role("network"), device, files.cpu_threads, files.cpu_spin)
        check_contract([i.shape for i in model.session.get_inputs()], [o.shape for o in model.session.get_outputs()])
        # On the CPU two requests may run at once on the one (thread-safe) session: the second uses
        # the cores the first leaves idle (a small network does not keep all of them busy).
        super().__init__(model, concurrent_runs=2 if model.device == "cpu" else 1)
