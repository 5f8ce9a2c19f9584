"""ONNX -> torch weight conversions, one module per network (pure functions), and their contract.

Each module exposes `CONVERTER`: its revision, which the catalogue's route names, and the function
that converts, checks and writes the prepared files. The contract lives here, not beside the
prepare step (craftai_prepare.conversion), so that the step imports the converters and no
converter imports the step. This module stays light: torch and onnx load only with a converter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

Step = Callable[[str], None]  # a converter says what it is doing


class ConversionError(ValueError):
    """The graph is not the network a converter knows, or the converted network does not reproduce it."""


@dataclass(frozen=True)
class Converter:
    """A conversion, named by the revision the catalogue's route carries."""

    revision: str
    # (source files by role, output folder, step) -> measured differences against the source
    run: Callable[[dict[str, Path], Path, Step], dict[str, float]]
    steps: int = 4


def write_weights(path: Path, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Write converted weights as safetensors. Serialised in memory and written by Python, so that
    a full disk is an OSError (ENOSPC) like any other, which the prepare step reports as such."""
    from safetensors.torch import save

    path.write_bytes(save({k: v.contiguous() for k, v in state_dict.items()}))


__all__ = ["ConversionError", "Converter", "Step", "write_weights"]
