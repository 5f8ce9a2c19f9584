"""u2netp for image.matte on OpenVINO (opt-in): the published ONNX file compiled by OpenVINO's CPU
plugin in f32 (craftai_infer.engines.openvino), the same rembg-compatible pipeline as the
onnxruntime route. Faster on a small CPU; its matte is within 1/255 of rembg's, not byte-identical
(docs/PERFORMANCE.md, "u2netp on the openvino engine")."""

from __future__ import annotations

from craftai_infer.engines.openvino import OpenvinoModel
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpGraph


class U2netpOpenvino(U2netpGraph):
    """Always on the CPU (OpenVINO's GPU plugin is for Intel GPUs): named, it runs there on any machine.
    Its infer requests, one per stream, let that many pictures run at once."""

    model: OpenvinoModel

    def __init__(self, files: RouteFiles, device: str) -> None:
        model = OpenvinoModel(files.role("network"), files.cpu_threads)
        super().__init__(model, concurrent_runs=model.concurrent_runs)
