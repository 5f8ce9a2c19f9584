"""SHA-256 while reading or writing, so a file is checked in the same pass that moves it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20


def sha256_file(path: Path, chunk: int = CHUNK) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class HashingWriter:
    """Writes to a file while counting bytes and hashing them; refuses to grow past a limit.

    The limit stops a source that serves more bytes than the pin long before the disk fills.
    """

    def __init__(self, f: BinaryIO, limit: int | None = None, *, initial: bytes | None = None) -> None:
        self._f = f
        self._digest = hashlib.sha256()
        self.size = 0
        self.limit = limit
        if initial:
            self._digest.update(initial)
            self.size = len(initial)

    def write(self, data: bytes) -> None:
        if self.limit is not None and self.size + len(data) > self.limit:
            raise OverflowError(f"more than the expected {self.limit:,} bytes")
        self._f.write(data)
        self._digest.update(data)
        self.size += len(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
