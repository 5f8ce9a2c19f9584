"""Reading a network's weights from a safetensors file, strictly, refused in plain words.

Every tensor the network has must be in the file with its shape and dtype, and nothing else: a
checkpoint of another network (or another revision of it) is refused naming the keys, before any
tensor is parsed. Safetensors only: a pickle is never loaded. With a pin, the bytes read are
checked against its size and SHA-256 first, so that the bytes parsed are the bytes checked (for
files no one has verified; the infer service's loader hashes the store's files itself, once).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

Expected = Mapping[str, tuple[tuple[int, ...], str]]  # name -> (shape, safetensors dtype name)

_SAFETENSORS_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.int32: "I32",
}


class Pin(Protocol):
    """A published file known by its exact size and SHA-256 (craftai_common.store.FilePin is one)."""

    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...


class CheckpointRefusedError(ValueError):
    """The file is not the pinned checkpoint, or its tensors do not fit the network."""


def expected_tensors(model: nn.Module, *, floats: torch.dtype | None = None) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every persistent tensor of `model` as name -> (shape, safetensors dtype name); `floats`: the
    dtype a published file stores the floating-point ones in, where it is not the model's."""

    def stored(v: Tensor) -> torch.dtype:
        return floats if floats is not None and v.is_floating_point() else v.dtype

    return {
        k: (tuple(v.shape), _SAFETENSORS_DTYPES.get(stored(v), str(stored(v)))) for k, v in model.state_dict().items()
    }


def _listing(names: Sequence[str], first: int = 5) -> str:
    shown = ", ".join(names[:first])
    more = f" and {len(names) - first} more" if len(names) > first else ""
    return f"{len(names)} ({shown}{more})"


def read_state_dict(path: Path, expected: Expected, *, pin: Pin | None = None) -> dict[str, Tensor]:
    """The file's tensors, refusing a file whose header does not hold exactly `expected`.

    The file is read once into memory; with a pin its size (before reading) and SHA-256 are checked
    before any tensor is parsed. Missing keys, extra keys and wrong shapes/dtypes are refused by name.
    """
    import safetensors.torch

    if pin is not None:
        found_size = path.stat().st_size
        if found_size != pin.size:
            raise CheckpointRefusedError(
                f"{path} is not the pinned {pin.name}: expected {pin.size:,} bytes, found {found_size:,}"
            )
    data = path.read_bytes()
    if pin is not None:
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != pin.size or digest != pin.sha256:
            raise CheckpointRefusedError(
                f"{path} is not the pinned {pin.name}: expected SHA-256 {pin.sha256}, found {digest}"
            )
    header = _safetensors_header(data, path)
    problems: list[str] = []
    missing = sorted(set(expected) - set(header))
    extra = sorted(set(header) - set(expected))
    if missing:
        problems.append(f"missing tensors: {_listing(missing)}")
    if extra:
        problems.append(f"unexpected tensors: {_listing(extra)}")
    wrong = [
        f"{k} is {header[k][1]}[{'x'.join(map(str, header[k][0]))}], expected {dt}[{'x'.join(map(str, shape))}]"
        for k, (shape, dt) in sorted(expected.items())
        if k in header and header[k] != (shape, dt)
    ]
    if wrong:
        problems.append(f"tensors of the wrong shape or type: {_listing(wrong, first=3)}")
    if problems:
        raise CheckpointRefusedError(f"{path} does not fit the network: " + "; ".join(problems))
    tensors = safetensors.torch.load(data)
    del data
    return tensors


def _safetensors_header(data: bytes, path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) from the JSON header (8-byte little-endian length, then JSON)."""
    try:
        (length,) = struct.unpack("<Q", data[:8])
        raw = json.loads(data[8 : 8 + length])
        return {k: (tuple(int(n) for n in v["shape"]), str(v["dtype"])) for k, v in raw.items() if k != "__metadata__"}
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise CheckpointRefusedError(f"{path} is not a safetensors file: {exc}") from exc
