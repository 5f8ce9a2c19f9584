"""The onnxruntime engine: a publisher's .onnx file run exactly as published.

The CUDA provider is used when the GPU is the chosen device and the installed onnxruntime has
it; otherwise the CPU provider (the session itself: craftai_models.onnx_sessions).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from craftai_models.onnx_sessions import open_session, session_device


class OnnxModel:
    """One InferenceSession; onnxruntime allows concurrent run() calls on it."""

    def __init__(self, path: Path, device: str, cpu_threads: int = 0, spin: bool = False) -> None:
        self.session = open_session(path, device, intra_op_threads=cpu_threads, spin=spin)
        self.device = session_device(self.session)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(None, dict(inputs)))
