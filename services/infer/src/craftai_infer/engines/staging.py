"""Host-to-device copies of pictures: from page-locked memory, the only kind a GPU copies from
while the host goes on.

A picture decoded by a route that asks for it (`Capabilities.pinned_pictures`) is copied into
page-locked memory on the CPU pool, beside its decode (`pinned_copy`): the model worker's upload is
then the DMA alone. Before, the worker copied every picture of a batch into one reused buffer,
waiting for the previous copy each time: at 32 requests in flight that serial copy was most of the
SAM route's worker time (docs/PERFORMANCE.md). Any other array goes through that one reused buffer
(`Tensor.pin_memory()` would allocate and lock fresh host memory on every call). A picture decoded
on the GPU (engines.nvjpeg) is there already: its pixels are used as they are
(craftai_infer.pipelines.picture.device_pixels).
"""

from __future__ import annotations

import numpy as np
import torch

from craftai_infer.pipelines.picture import device_pixels


def pinned_copy(array: np.ndarray) -> np.ndarray:
    """`array` copied into page-locked memory from torch's caching host allocator (a block is
    reused only once the copies out of it have finished); an array like any other for the host."""
    tensor = torch.empty(array.shape, dtype=torch.uint8, pin_memory=True)
    out: np.ndarray = tensor.numpy()
    np.copyto(out, array)
    return out


def _pinned_tensor(array: np.ndarray) -> torch.Tensor | None:
    """The page-locked tensor `pinned_copy` made `array` from, itself (the copy to the device must
    be made from it, so that the allocator knows to wait for the copy before reusing the block)."""
    base = array.base
    if (
        isinstance(base, torch.Tensor)
        and tuple(base.shape) == array.shape
        and base.data_ptr() == array.__array_interface__["data"][0]
        and base.is_pinned()
    ):
        return base
    return None


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
        on_device = device_pixels(array, self.device)
        if on_device is not None:
            return on_device
        pinned = _pinned_tensor(array)
        if pinned is not None:
            return pinned.to(self.device, non_blocking=True)
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
