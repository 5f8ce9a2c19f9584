"""The onnxruntime engine: a publisher's .onnx file run exactly as published.

The CUDA provider is used when the GPU is the chosen device and the installed onnxruntime has
it; otherwise the CPU provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort


class OnnxModel:
    """One InferenceSession; not thread-safe by contract here: a model worker owns it."""

    def __init__(self, path: Path, device: str, cpu_threads: int = 0) -> None:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if cpu_threads:
            options.intra_op_num_threads = cpu_threads
        providers: list[Any] = ["CPUExecutionProvider"]
        if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            index = int(device.partition(":")[2] or 0)
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
        self.session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        self.device = "cuda:0" if self.session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(None, dict(inputs)))
