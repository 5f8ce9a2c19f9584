"""Fault injection for tests on machines without a GPU (CRAFTAI_FAULT_INJECTION; never set it in
production).

`gpu-oom-once`: every route is built as usual on the CPU but presented as running on "cuda:0",
and its first model call fails the way an out-of-memory GPU does. The real fallback path then
runs: the model is rebuilt on the CPU from the same files, the request is answered there with a
FELL_BACK_TO_CPU notice, and the model stays on the CPU.

`slow-model`: every model call waits SLOW_SECONDS first (on the model's worker, as slow work does),
so that tests can stop or kill a server while a request is surely in progress.

The loader builds routes through `Fault.build` and calls `Fault.before_call` on the worker before
each call of a route it built so (craftai_infer.loader.LoadedRoute).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from craftai_infer.routes import Route

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


@dataclass
class Fault:
    """One injected fault, for one loaded route."""

    mode: str
    _failed: bool = False

    def build(self, build: Callable[[str], Route]) -> Route:
        """The route, built on the CPU (`build(device)`); presented as on the GPU for gpu-oom-once."""
        route = build("cpu")
        if self.mode == GPU_OOM_ONCE:
            route.device = "cuda:0"
        return route

    def before_call(self, route: Route) -> None:
        """On the model's worker, before a call of the route built by `build`."""
        if self.mode == SLOW_MODEL:
            time.sleep(SLOW_SECONDS)
        elif self.mode == GPU_OOM_ONCE and route.device != "cpu" and not self._failed:
            self._failed = True
            raise _oom_error()
