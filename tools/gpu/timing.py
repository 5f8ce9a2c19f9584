"""Timing for the GPU checks: CUDA events around each call on the GPU (the kernels' time, not
the launch), perf_counter on the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def times_ms(fn: Callable[[], object], device: torch.device, *, reps: int, warmup: int) -> list[float]:
    """The time of each of `reps` calls, in ms, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    samples: list[float] = []
    for _ in range(reps):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(float(start.elapsed_time(end)))
        else:
            started = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - started) * 1000.0)
    return samples
