"""Pictures in page-locked memory (craftai_infer.engines.staging): copied to the GPU as they are,
and their blocks not reused by the allocator before those copies have finished."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from craftai_infer.engines.cuda_graphs import GraphCache
from craftai_infer.engines.staging import HostStaging, _pinned_tensor, pinned_copy

pytestmark = pytest.mark.gpu


def test_pinned_pictures_upload_as_they_are_and_are_not_overwritten_in_flight() -> None:
    staging = HostStaging(torch.device("cuda"))
    rng = np.random.default_rng(0)
    pictures = [rng.integers(0, 256, (1536, 2048, 3), dtype=np.uint8) for _ in range(8)]
    pinned = [pinned_copy(p) for p in pictures]
    assert all(_pinned_tensor(p) is not None for p in pinned) and _pinned_tensor(pictures[0]) is None
    torch.cuda._sleep(50_000_000)  # type: ignore[no-untyped-call]  # the copies below queue behind ~tens of ms of device work
    uploaded = [staging.upload(p) for p in pinned]
    del pinned  # the blocks go back to the allocator while their copies wait on the device
    reused = [pinned_copy(np.zeros_like(p)) for p in pictures]  # would overwrite a block reused early
    for picture, on_device in zip(pictures, uploaded, strict=True):
        assert on_device.device.type == "cuda" and np.array_equal(on_device.cpu().numpy(), picture)
    ordinary = staging.upload(pictures[0])  # not pinned: through the one reused buffer
    assert np.array_equal(ordinary.cpu().numpy(), pictures[0]) and len(reused) == 8


def test_captures_are_not_broken_by_another_thread_pinning_pictures() -> None:
    """Graphs captured (a new shape each time) while another thread keeps allocating page-locked
    memory, as the CPU pool does under load: every capture succeeds and replays right."""
    weight = torch.randn(512, 512, device="cuda")
    cache = GraphCache(lambda x: (torch.tanh(x @ weight) @ weight,), torch.device("cuda"), capacity=4)
    stop = threading.Event()
    made = [0]

    def pin() -> None:
        while not stop.is_set():
            pinned_copy(np.zeros((int(256 + made[0] % 64), 640, 3), np.uint8))  # new sizes: fresh host allocations
            made[0] += 1

    thread = threading.Thread(target=pin)
    thread.start()
    try:
        for n in range(1, 25):
            x = torch.randn(n, 512, device="cuda")
            (out,) = cache.run(n, [x])
            torch.testing.assert_close(out, torch.tanh(x @ weight) @ weight)
    finally:
        stop.set()
        thread.join()
    assert made[0] > 10
