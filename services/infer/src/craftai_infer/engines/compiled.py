"""torch.compile (inductor) of a GPU function, with the function itself as the fallback.

Where a network is bound by memory traffic between many small kernels rather than by arithmetic
(the SAM decoder on a batch of grid points: layer norms, GELUs, adds and casts around a few
GEMMs), inductor fuses those chains into a few generated kernels; the result is then captured in
a CUDA graph like the eager function (engines.cuda_graphs). Shapes are static (`dynamic=False`):
one compilation per input shape, so callers keep to a few shapes (padded batches).

Compiling needs Triton and a C compiler on the machine and takes tens of seconds the first time
on a machine (inductor keeps its kernels in TORCHINDUCTOR_CACHE_DIR, by default under /tmp, so a
later load takes about a second). Where it cannot compile, the first call says why in the log and
the eager function answers from then on: a compiler missing never fails a request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.exc

log = logging.getLogger("craftai.infer.compiled")

Fn = Callable[..., Any]


class Compiled:
    """`fn` compiled on first call; `fn` itself once compiling has failed (`fell_back` says so).

    Only a compiler's failure (torch._dynamo's exceptions) falls back: an error of the function
    itself (out of memory, bad input) is raised as it would be uncompiled.
    """

    def __init__(self, fn: Fn, name: str, *, backend: str | Callable[..., Any] = "inductor") -> None:
        self._eager = fn
        self._name = name
        self._compiled: Fn = torch.compile(fn, dynamic=False, backend=backend)
        self._lock = threading.Lock()
        self.fell_back = False

    def __call__(self, *inputs: Any) -> Any:
        if self.fell_back:
            return self._eager(*inputs)
        try:
            return self._compiled(*inputs)
        except torch._dynamo.exc.TorchDynamoException as error:
            cause = getattr(error, "inner_exception", None) or error  # the backend's own error
            with self._lock:
                if not self.fell_back:
                    self.fell_back = True
                    log.warning(
                        "torch.compile of %s failed (%s: %s); it runs uncompiled from now on",
                        self._name,
                        type(cause).__name__,
                        next(iter(str(cause).splitlines()), ""),
                    )
            return self._eager(*inputs)
