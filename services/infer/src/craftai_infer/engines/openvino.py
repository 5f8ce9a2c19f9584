"""The OpenVINO engine: a publisher's .onnx file compiled by OpenVINO's CPU plugin (opt-in).

OpenVINO reads the ONNX file as published (no conversion step, no prepared folder) and on a small
CPU runs u2netp faster than onnxruntime (docs/PERFORMANCE.md, "u2netp on the openvino engine"). It
is optional: the package comes with `craftai-infer[openvino]`; this module (and so the package) is
imported only when a route of this engine is first built, and where it is missing the route list
answers ENGINE_NOT_INSTALLED naming the extra to install (routes/registry.py), as for every engine.

Precision is f32, asked for explicitly: the CPU plugin's default on CPUs with bf16 moved u2netp's
matte by up to 165/255; in f32 it stays within 1/255 of onnxruntime's (not byte-identical: only
the onnxruntime engine is). The performance hint and streams were chosen by measuring on a small
CPU (docs/PERFORMANCE.md); `cpu_threads` (CRAFTAI_CPU_THREADS) bounds the plugin's threads.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

# LATENCY: one stream whose threads take every core (or CRAFTAI_CPU_THREADS). Measured on a quiet
# small CPU (docs/PERFORMANCE.md, "u2netp on the openvino engine"): THROUGHPUT's one-thread streams
# left one caller far slower than onnxruntime, and a model of each hint picked by the calls in
# flight oversubscribed the cores; LATENCY was ahead of onnxruntime with one caller and with two.
PERFORMANCE_HINT = "LATENCY"
# Infer requests (and so calls that may run at once): the second call's pre- and post-processing
# overlap the first's network, which the one stream runs one at a time.
REQUESTS = 2
INFERENCE_PRECISION = "f32"


def compile_config(cpu_threads: int = 0) -> dict[str, str]:
    """The CPU plugin's properties: the hint, f32, and at most `cpu_threads` threads (0: its default, one per core)."""
    config = {"PERFORMANCE_HINT": PERFORMANCE_HINT, "INFERENCE_PRECISION_HINT": INFERENCE_PRECISION}
    if cpu_threads:
        config["INFERENCE_NUM_THREADS"] = str(cpu_threads)
    return config


class OpenvinoModel:
    """One compiled model on the CPU and `concurrent_runs` infer requests: `run` may be called from
    that many threads at once, each taking a request of its own (a request runs one inference at a
    time; the compiled model's weights are shared between them)."""

    device = "cpu"

    def __init__(self, path: Path, cpu_threads: int = 0) -> None:
        self.compiled: Any = ov.Core().compile_model(str(path), "CPU", compile_config(cpu_threads))
        self.input_names = [i.get_any_name() for i in self.compiled.inputs]
        self.output_names = [o.get_any_name() for o in self.compiled.outputs]
        self.concurrent_runs = max(REQUESTS, int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(self.concurrent_runs):
            self._requests.put(self.compiled.create_infer_request())

    def setting(self, name: str) -> str:
        """A property of the compiled model as text, as it is set (e.g. INFERENCE_PRECISION_HINT "f32")."""
        value = self.compiled.get_property(name)
        return str(value.get_type_name() if hasattr(value, "get_type_name") else value)  # an element type: "f32"

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Every output, in the graph's order, as arrays of their own (the request's buffers are reused)."""
        request = self._requests.get()
        try:
            request.infer(dict(inputs))
            return [np.array(request.get_output_tensor(i).data) for i in range(len(self.output_names))]
        finally:
            self._requests.put(request)
