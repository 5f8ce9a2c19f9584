"""Fault injection for tests on machines without a GPU (CRAFTAI_FAULT_INJECTION; never set it in
production).

`gpu-oom-once`: every route is built as usual on the CPU but presented as running on "cuda:0",
and its first model call fails the way an out-of-memory GPU does. The real fallback path then
runs: the model is rebuilt on the CPU from the same files, the request is answered there with a
FELL_BACK_TO_CPU notice, and the model stays on the CPU.

`slow-model`: every model call waits SLOW_SECONDS first (on the model's worker, as slow work does),
so that tests can stop or kill a server while a request is surely in progress.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

GPU_OOM_ONCE = "gpu-oom-once"
SLOW_MODEL = "slow-model"
SLOW_SECONDS = 3.0
KNOWN = ("", GPU_OOM_ONCE, SLOW_MODEL)


def _oom_error() -> Exception:
    message = "CUDA out of memory (injected by CRAFTAI_FAULT_INJECTION=gpu-oom-once)"
    try:
        import torch

        return torch.cuda.OutOfMemoryError(message)
    except (ImportError, AttributeError):
        return RuntimeError(message)


class SimulatedGpuModel:
    """A CPU model that says it runs on the GPU and fails its first call with an out-of-memory error."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._failed = False
        self.device = "cuda:0"

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._model, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self._failed:
                self._failed = True
                raise _oom_error()
            return attribute(*args, **kwargs)

        return call


class SlowModel:
    """A CPU model whose every call first waits SLOW_SECONDS."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._model, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            time.sleep(SLOW_SECONDS)
            return attribute(*args, **kwargs)

        return call


def wrap(mode: str, build: Callable[[str], Any]) -> Any:
    """Build through `build(device)`, applying the injected fault if any."""
    if mode == GPU_OOM_ONCE:
        return SimulatedGpuModel(build("cpu"))
    if mode == SLOW_MODEL:
        return SlowModel(build("cpu"))
    return build("cuda:0")
