"""Host-to-device copies through one reused page-locked buffer.

`Tensor.pin_memory()` allocates and locks fresh host memory on every call (milliseconds for a
photo); a model worker copies one picture at a time, so one buffer, grown when needed and reused
once the previous asynchronous copy has finished, does the same job at memcpy speed.
"""

from __future__ import annotations

import numpy as np
import torch


class HostStaging:
    """Owned by one model worker thread (not thread-safe)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffer: torch.Tensor | None = None
        self._done: torch.cuda.Event | None = None

    def upload(self, array: np.ndarray) -> torch.Tensor:
        """`array` on the device (same shape and dtype); the copy is asynchronous."""
        if self.device.type != "cuda":
            return torch.from_numpy(np.require(array, requirements=("C", "W"))).to(self.device)
        if self._done is not None:
            self._done.synchronize()  # the previous copy out of the buffer has finished
        nbytes = array.nbytes
        if self._buffer is None or self._buffer.numel() < nbytes:
            self._buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True)
        host = self._buffer[:nbytes].numpy().view(array.dtype).reshape(array.shape)
        np.copyto(host, array)
        on_device = torch.from_numpy(host).to(self.device, non_blocking=True)
        self._done = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._done.record()
        return on_device
