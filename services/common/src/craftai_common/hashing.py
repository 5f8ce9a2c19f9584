"""SHA-256 while reading or writing, so a file is checked in the same pass that moves it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20


def sha256_file(path: Path, chunk: int = CHUNK, progress: Callable[[int], None] | None = None) -> str:
    """The file's SHA-256; `progress` hears the bytes hashed so far after each chunk (a large model
    takes seconds to check, and the caller may be streaming progress to a user)."""
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
            if progress is not None:
                done += len(block)
                progress(done)
    return digest.hexdigest()


class HashingWriter:
    """Appends to a file while counting bytes and hashing them; refuses to grow past a limit.

    `resume` picks up a partial file left by an earlier attempt (its bytes are hashed again, so
    the final digest covers the whole file); `restart` empties it when a source cannot resume.
    The limit stops a source that serves more bytes than the pin long before the disk fills.
    """

    def __init__(self, f: BinaryIO, limit: int | None = None) -> None:
        self._f = f
        self._digest = hashlib.sha256()
        self.size = 0
        self.limit = limit

    @classmethod
    def resume(cls, f: BinaryIO, limit: int | None = None) -> HashingWriter:
        """`f` is opened in append mode ("a+b"); its current bytes count as written."""
        writer = cls(f, limit)
        f.seek(0)
        while block := f.read(CHUNK):
            writer._digest.update(block)
            writer.size += len(block)
        return writer

    def restart(self) -> None:
        self._f.seek(0)
        self._f.truncate()
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        if self.limit is not None and self.size + len(data) > self.limit:
            raise OverflowError(f"more than the expected {self.limit:,} bytes")
        self._f.write(data)
        self._digest.update(data)
        self.size += len(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
