"""image.matte's outputs made from a route's mattes, inside the route's MATTE call (on its worker,
batched with the mattes, under the same GPU-to-CPU fallback: craftai_infer.routes).

Where only the matte is asked and the route answered a host array, there is nothing to make and
torch is never imported (an infer service without torch runs u2netp on onnxruntime); everything
else is pipelines/matte_outputs.py `render` on the route's device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from craftai_infer.pipelines.matte_spec import Matte, OutputsSpec, Rendered
from craftai_infer.pipelines.picture import Picture


class TorchMissingError(Exception):
    """The outputs asked are made with torch, which this process cannot import (the message says why)."""


def render_device(device: str) -> str:
    """Where a route's outputs are made: its device, or the CPU when torch cannot reach that GPU (an
    onnxruntime route on CUDA beside a CPU-only torch, or a route the fault injection presents as on one)."""
    if device == "cpu":
        return device
    import torch

    return device if torch.cuda.is_available() else "cpu"


def rendered(jobs: Sequence[tuple[Picture, Matte, OutputsSpec]], device: str) -> list[Rendered]:
    """Each (picture, its matte, what to make) -> its outputs as host arrays; `device`: the route's."""
    answers = []
    for picture, matte, spec in jobs:
        if spec.kinds == {"matte"} and isinstance(matte, np.ndarray):
            answers.append(Rendered(matte=matte))  # nothing to make: no torch, no copy
        else:
            answers.append(_render()(picture, matte, spec, render_device(device)))
    return answers


def _render() -> Callable[[Picture, Matte, OutputsSpec, str], Rendered]:
    """pipelines.matte_outputs.render, imported on first use (torch)."""
    try:
        from craftai_infer.pipelines.matte_outputs import render
    except ImportError as exc:
        raise TorchMissingError(str(exc)) from exc
    return render
