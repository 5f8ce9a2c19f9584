"""ONNX -> torch weight conversions, one module per network (pure functions), and their contract.

Each module exposes `CONVERTER`: its revision, which the catalogue's route names, and the function
that converts, checks and writes the prepared files. The contract lives here, not beside the
prepare step (craftai_prepare.conversion), so that the step imports the converters and no
converter imports the step. This module stays light: torch and onnx load only with a converter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


__all__ = ["ConversionError", "Converter", "Step"]
