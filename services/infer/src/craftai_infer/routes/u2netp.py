"""u2netp for image.matte: the published ONNX through onnxruntime, rembg-compatible pipeline."""

from __future__ import annotations

from PIL import Image

from craftai_infer.engines.onnxruntime import OnnxModel
from craftai_infer.pipelines import matte_u2netp
from craftai_infer.routes import RouteFiles


class U2netpOnnx:
    def __init__(self, files: RouteFiles, device: str) -> None:
        self.model = OnnxModel(files.role("network"), device, files.cpu_threads)
        self.device = self.model.device
        self.input_name = self.model.input_names[0]

    def matte(self, picture: Image.Image) -> Image.Image:
        (fused, *_sides) = self.model.run({self.input_name: matte_u2netp.preprocess(picture)})
        return matte_u2netp.postprocess(fused, picture.size)
