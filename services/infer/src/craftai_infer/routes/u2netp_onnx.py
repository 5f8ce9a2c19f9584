"""rembg's U²-Net family for image.matte on onnxruntime (u2netp, u2net, u2net_human_seg, silueta):
the published ONNX run as published, with the rembg-compatible pipeline
(craftai_infer.pipelines.matte_u2netp), which rembg applies to all four alike (and, at another size
and normalisation, to its IS-Net and BiRefNet files: routes/isnet_onnx.py, routes/birefnet_rembg_onnx.py).

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


def check_contract(
    inputs: Sequence[Sequence[object]],
    outputs: Sequence[Sequence[object]],
    size: int = matte_u2netp.SIZE,
    maps: int = 1,
) -> None:
    """The graph's shapes are those of the rembg files (one `size`² picture in, the answer's `maps`
    maps first out): a graph of another contract is refused when the route loads it, in words,
    rather than answering nonsense (a dimension the graph leaves named is taken as it comes)."""
    input_shape, fused_shape = [1, 3, size, size], [1, maps, size, size]

    def fits(shape: Sequence[object], expected: list[int]) -> bool:
        return len(shape) == len(expected) and all(
            not isinstance(d, int) or d == e for d, e in zip(shape, expected, strict=True)
        )

    if len(inputs) != 1 or not fits(inputs[0], input_shape):
        raise ModelRefusedError(f"the graph's inputs are {[list(i) for i in inputs]}, not one {input_shape} picture")
    if not outputs or not fits(outputs[0], fused_shape):
        first = list(outputs[0]) if outputs else "none"
        what = "fused map" if maps == 1 else "class logits"
        raise ModelRefusedError(f"the graph's first output is {first}, not the {fused_shape} {what}")


class GraphModel(Protocol):
    """An engine's model of the published graph: named inputs in, every output out, in order."""

    device: str
    input_names: list[str]

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...


class U2netpGraph(MatteRoute):
    """The published graph takes one picture at a time; `concurrent_runs` pictures may run at once.
    `steps` are what rembg's session of the file does around it."""

    steps: matte_u2netp.Steps = matte_u2netp.U2NET

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
        height, width = picture.shape[:2]
        return matte_u2netp.postprocess(self._first_output(picture), (width, height), self.steps)

    def _first_output(self, picture: Picture) -> npt.NDArray[np.float32]:
        """The graph's first output for the picture, fed as rembg's session feeds it."""
        scratch = getattr(self._scratch, "arrays", None)
        if scratch is None:
            scratch = self._scratch.arrays = matte_u2netp.Scratch(self.steps.size)
        x = matte_u2netp.preprocess(picture, scratch, self.steps)
        (first, *_others) = self.model.run({self.input_name: x})
        return first


class U2netpOnnx(U2netpGraph):
    """onnxruntime: byte-identical to rembg's matte on the same file (the default engine)."""

    model: OnnxModel
    # On the CPU two requests may run at once on the one (thread-safe) session: the second uses the
    # cores the first leaves idle (a small network does not keep all of them busy).
    cpu_concurrent_runs = 2
    shrink_cpu_arena = False  # onnxruntime.OnnxModel: a 320² network's working memory is small
    maps = 1  # the channels of the graph's first output

    def __init__(self, files: RouteFiles, device: str) -> None:
        model = OnnxModel(
            files.role("network"), device, files.cpu_threads, files.cpu_spin, shrink_cpu_arena=self.shrink_cpu_arena
        )
        check_contract(
            [i.shape for i in model.session.get_inputs()],
            [o.shape for o in model.session.get_outputs()],
            self.steps.size,
            self.maps,
        )
        super().__init__(model, concurrent_runs=self.cpu_concurrent_runs if model.device == "cpu" else 1)
