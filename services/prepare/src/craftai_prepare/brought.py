"""Files a caller brings (SetupFrom): received against the route's pins, never trusted.

The setup of a machine that cannot reach the sources (offline, or a container without egress)
gets the files from its caller instead, streamed over the call: the caller may be on another
machine than the store (a remote or containerised server), so the bytes travel, never a path.
Each file must claim one of the route's pins (folder, name, size, SHA-256), once; its bytes go to
`tmp/uploads/<random>/<sha256>`, hashed while written and cut off at the pinned size, and must
then be exactly the pin's. The job places them under the route's lock (downloads.place); the
folder is removed when the call ends, whatever ended it.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from craftai_common.errors import invalid_argument, shown
from craftai_common.hashing import HashingWriter
from craftai_common.store import FilePin, Store, mismatch_message
from craftai_prepare.full_disk import no_space
from craftai_wire.v1 import prepare_pb2
from craftai_wire.vocabulary import Reason

MAX_CHUNK = 1 << 20  # the most bytes one message carries (the SDK sends 1 MiB chunks)
ORIGIN_CHARACTERS = 512  # how much of the caller's words for a file's origin is kept


@dataclass(frozen=True)
class Received:
    """A brought file whose bytes are the pin's, waiting under tmp/uploads/ to be placed."""

    pin: FilePin
    path: Path
    origin: str


@dataclass
class Receiver:
    """One call's brought files, received one after the other into a folder of its own."""

    store: Store
    pins: list[FilePin]
    route: str  # feature/recipe/engine, for words
    folder: Path = field(init=False)
    received: list[Received] = field(default_factory=list)
    bytes_received: int = 0
    _current: tuple[FilePin, str, BinaryIO, HashingWriter] | None = None
    _claimed: bool = False
    _claim_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        uploads = self.store.tmp / "uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="upload-", dir=uploads))

    @property
    def expected(self) -> int:
        """Bytes the files announced so far will hold in all."""
        return sum(r.pin.size for r in self.received) + (self._current[0].size if self._current else 0)

    def start(self, brought: prepare_pb2.BroughtFile) -> None:
        """The next file: the one before it finished, this one's pin checked against the route's."""
        self._finish_current()
        claimed = FilePin(brought.folder, brought.name, brought.size, brought.sha256)
        if claimed not in self.pins:
            names = ", ".join(f"{p.folder}/{p.name} ({p.size:,} bytes, SHA-256 {p.sha256})" for p in self.pins)
            raise invalid_argument(
                Reason.FILE_MISMATCH,
                f"{shown(f'{brought.folder}/{brought.name}')} ({brought.size:,} bytes, "
                f"SHA-256 {shown(brought.sha256)}) is not a file of {self.route}, whose files are: {names}",
                field="file",
            )
        if any(r.pin == claimed for r in self.received):
            raise invalid_argument(Reason.FILE_MISMATCH, f"{claimed.name} was brought twice", field="file")
        path = self.folder / claimed.sha256
        try:
            handle = path.open("xb")
        except OSError as exc:
            raise self._os_error(exc, claimed) from exc
        origin = brought.origin[:ORIGIN_CHARACTERS] or "the caller"
        self._current = (claimed, origin, handle, HashingWriter(handle, limit=claimed.size))

    def chunk(self, data: bytes) -> None:
        """Bytes of the current file, hashed while written; more than its pin is refused at once."""
        if self._current is None:
            raise invalid_argument(Reason.FILE_MISMATCH, "bytes came before the file they belong to", field="chunk")
        if len(data) > MAX_CHUNK:
            raise invalid_argument(
                Reason.FILE_MISMATCH, f"a chunk of {len(data):,} bytes: at most {MAX_CHUNK:,} a message", field="chunk"
            )
        pin, _, _, writer = self._current
        try:
            writer.write(data)
        except OverflowError as exc:
            raise invalid_argument(
                Reason.FILE_MISMATCH, f"the bytes brought for {pin.name} are more than its pinned {pin.size:,}"
            ) from exc
        except OSError as exc:
            raise self._os_error(exc, pin) from exc
        self.bytes_received += len(data)

    def finish(self) -> list[Received]:
        """Every file received whole and checked (the stream has ended)."""
        self._finish_current()
        return list(self.received)

    def claim(self) -> bool:
        """True once: whoever claims the files (the job, or the call that ends before the job took
        them) removes them."""
        with self._claim_lock:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def discard(self) -> None:
        if self._current is not None:
            self._current[2].close()
            self._current = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def _finish_current(self) -> None:
        if self._current is None:
            return
        pin, origin, handle, writer = self._current
        self._current = None
        try:
            handle.flush()
            os.fsync(handle.fileno())
        except OSError as exc:
            raise self._os_error(exc, pin) from exc
        finally:
            handle.close()
        if writer.size != pin.size or writer.hexdigest() != pin.sha256:
            raise invalid_argument(
                Reason.FILE_MISMATCH,
                f"the bytes brought from {origin} are not the pinned file: "
                f"{mismatch_message(pin, writer.size, writer.hexdigest())}",
            )
        self.received.append(Received(pin, self.folder / pin.sha256, origin))

    def _os_error(self, exc: OSError, pin: FilePin) -> Exception:
        if exc.errno == errno.ENOSPC:
            return no_space(self.store, f"receiving {pin.name} ({pin.size:,} bytes)", file=pin.name)
        return exc
