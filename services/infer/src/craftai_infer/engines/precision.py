"""Autocast on the GPU: the dtype a torch route runs under for CRAFTAI_GPU_PRECISION."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def autocast_dtype(precision: str, default: torch.dtype | None) -> torch.dtype | None:
    """The route's tested `default` for "auto", else the asked precision (None: fp32, no autocast)."""
    if precision == "auto":
        return default
    try:
        return DTYPES[precision]
    except KeyError:
        raise ValueError(f"unknown GPU precision {precision!r} (known: auto, {', '.join(DTYPES)})") from None
