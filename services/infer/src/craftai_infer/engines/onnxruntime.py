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
    """One InferenceSession; onnxruntime allows concurrent run() calls on it.

    `shrink_cpu_arena`: on the CPU, each run gives its working memory back when it ends (onnxruntime's
    arena otherwise keeps its peak for the life of the session). For a network whose working memory
    is large beside its weights (a 1024² input: 0.4 to 3 GB), which the request's cost admits before
    it runs (MatteRoute.working_bytes): kept, it would stay resident per loaded route, counted nowhere."""

    def __init__(
        self, path: Path, device: str, cpu_threads: int = 0, spin: bool = False, *, shrink_cpu_arena: bool = False
    ) -> None:
        import onnxruntime as ort

        self.session = open_session(path, device, intra_op_threads=cpu_threads, spin=spin)
        self.device = session_device(self.session)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.run_options: ort.RunOptions | None = None
        if shrink_cpu_arena and self.device == "cpu":
            self.run_options = ort.RunOptions()
            self.run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(None, dict(inputs), self.run_options))
