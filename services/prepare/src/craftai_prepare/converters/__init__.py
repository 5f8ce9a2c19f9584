"""One-time conversions into the prepared cache, one module per network (pure functions), and their contract.

Each module exposes `CONVERTER`: its revision, which the catalogue's route names, and the function
that converts (or edits), checks and writes the prepared files. The contract lives here, not beside
the prepare step (craftai_prepare.conversion), so that the step imports the converters and no
converter imports the step. This module stays light: torch and onnx load only with a converter.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from craftai_common.limits import memory_limit

if TYPE_CHECKING:
    import torch

Step = Callable[[str], None]  # a converter says what it is doing


class ConversionError(ValueError):
    """The graph is not the network a converter knows, or the converted network does not reproduce it."""


@dataclass(frozen=True)
class Inputs:
    """What a conversion reads: the route's own files by role, the recipe's settings of each (by
    role), and the files of the recipe's other routes it checks itself against, by role, only
    those on disk and verified (the route never fetches them)."""

    sources: Mapping[str, Path]
    settings: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    references: Mapping[str, Path] = field(default_factory=dict)
    checks: tuple[str, ...] = ()  # every file the route checks itself against, on disk or not
    memory_limit_bytes: int = 0  # what the process may use; 0: its cgroup's limit, else the machine's

    def memory_limit(self) -> tuple[int, str]:
        """What a self-check's memory is sized against, and where the figure comes from."""
        if self.memory_limit_bytes:
            return self.memory_limit_bytes, "CRAFTAI_MEMORY_LIMIT_BYTES"
        return memory_limit()

    def setting(self, role: str, name: str) -> str:
        """A setting the recipe must give, or ConversionError saying which."""
        value = self.settings.get(role, {}).get(name)
        if value is None:
            raise ConversionError(f"the recipe gives its {role} file no {name!r} setting, which this route needs")
        return value


@dataclass(frozen=True)
class Outcome:
    """What the manifest records: the measured differences against the source, and, in plain words,
    what could not be checked (empty when everything was)."""

    verification: dict[str, float]
    unverified: str = ""


@dataclass(frozen=True)
class Converter:
    """A conversion, named by the revision the catalogue's route carries."""

    revision: str
    run: Callable[[Inputs, Path, Step], Outcome]
    steps: int = 4


def own_files_only(
    prepare: Callable[[Mapping[str, Path], Path, Step], dict[str, float]],
) -> Callable[[Inputs, Path, Step], Outcome]:
    """A conversion that reads only its route's own files and checks everything it writes."""

    def run(inputs: Inputs, out: Path, step: Step) -> Outcome:
        return Outcome(prepare(inputs.sources, out, step))

    return run


def write_weights(path: Path, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Write converted weights as safetensors. Serialised in memory and written by Python, so that
    a full disk is an OSError (ENOSPC) like any other, which the prepare step reports as such."""
    from safetensors.torch import save

    path.write_bytes(save({k: v.contiguous() for k, v in state_dict.items()}))


def place_copy(source: Path, target: Path) -> None:
    """A published file put into the prepared folder as it is: a hard link where the store's file
    system allows one (no second copy of the bytes on disk), else a copy. Published files are never
    modified in place (a new download is renamed over the old path), so the link keeps the bytes the
    manifest hashes."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


__all__ = [
    "ConversionError",
    "Converter",
    "Inputs",
    "Outcome",
    "Step",
    "own_files_only",
    "place_copy",
    "write_weights",
]
