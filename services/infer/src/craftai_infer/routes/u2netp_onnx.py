"""u2netp for image.matte on onnxruntime: the published ONNX run as published, with the
rembg-compatible pipeline (craftai_infer.pipelines.matte_u2netp).

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
from craftai_infer.routes import Capabilities, MatteRoute, RouteFiles


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
        # On the CPU two requests may run at once on the one (thread-safe) session: the second uses
        # the cores the first leaves idle (a small network does not keep all of them busy).
        super().__init__(model, concurrent_runs=2 if model.device == "cpu" else 1)
