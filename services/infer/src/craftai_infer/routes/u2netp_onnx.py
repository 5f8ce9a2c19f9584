"""u2netp for image.matte on onnxruntime: the published ONNX run as published, with the
rembg-compatible pipeline (craftai_infer.pipelines.matte_u2netp)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from craftai_infer.engines.onnxruntime import OnnxModel
from craftai_infer.pictures import Picture
from craftai_infer.pipelines import matte_u2netp
from craftai_infer.routes import Capabilities, MatteRoute, RouteFiles


class U2netpOnnx(MatteRoute):
    """The published graph takes one picture at a time."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        self.model = OnnxModel(files.role("network"), device, files.cpu_threads, files.cpu_spin)
        self.device = self.model.device
        self.input_name = self.model.input_names[0]
        # On the CPU two requests may run at once on the one (thread-safe) session: the second uses
        # the cores the first leaves idle (a small network does not keep all of them busy).
        self.capabilities = Capabilities(concurrent_runs=2 if self.device == "cpu" else 1)

    def matte(self, pictures: Sequence[Picture]) -> list[npt.NDArray[np.uint8]]:
        """Host arrays: the pipeline's post-processing is Pillow's (rembg's)."""
        return [self._matte(picture) for picture in pictures]

    def _matte(self, picture: Picture) -> npt.NDArray[np.uint8]:
        (fused, *_sides) = self.model.run({self.input_name: matte_u2netp.preprocess(picture)})
        height, width = picture.shape[:2]
        return matte_u2netp.postprocess(fused, (width, height))
