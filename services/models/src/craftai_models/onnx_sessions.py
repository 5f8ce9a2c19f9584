"""The one way this project opens an ONNX graph in onnxruntime: serving routes and conversion probes alike.

The CUDA provider comes first when a GPU is asked for and the installed onnxruntime has it; the CPU
provider is always there to fall back on. `intra_op_threads` 0 leaves onnxruntime's default (one
per core). A graph may be a path or the bytes of a model already in memory.

`spin` False makes onnxruntime's intra-op threads sleep between runs instead of spinning (its
default): a serving process shares its cores with gRPC's threads and the picture codecs, and
spinning workers take those cores from them between requests (docs/PERFORMANCE.md, "u2netp
through `craftai serve` against rembg's `remove()`").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def providers(device: str = "cpu") -> list[Any]:
    """onnxruntime providers in order of preference for `device` ("cpu", "cuda" or "cuda:N")."""
    import onnxruntime as ort

    chosen: list[Any] = ["CPUExecutionProvider"]
    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        index = int(device.partition(":")[2] or 0)
        chosen.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
    return chosen


def open_session(
    graph: Path | str | bytes, device: str = "cpu", *, intra_op_threads: int = 0, spin: bool = True
) -> Any:
    """An onnxruntime InferenceSession on `device` (the CPU when CUDA is not there to be had)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    source = graph if isinstance(graph, bytes) else str(graph)
    return ort.InferenceSession(source, sess_options=options, providers=providers(device))


def session_device(session: Any) -> str:
    """The device a session really runs on: CUDA may have been refused when it was opened."""
    return "cuda:0" if session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"
