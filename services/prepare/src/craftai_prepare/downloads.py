"""Pinned downloads: sources tried in order, size and SHA-256 checked while writing, atomic publish.

Nothing is visible under models/ until it is complete and verified: bytes go to a partial file
under tmp/ and are renamed into place only when they match the pin. A file already in place is
only checked (every byte hashed); a file that does not match is replaced by the pinned one.

The partial file is opened without following a symbolic link (O_NOFOLLOW): a link planted at its
path would otherwise make the setup truncate or append to whatever it points to; it is refused in
plain words (FAILED_PRECONDITION / UNSAFE_STORE). A full disk is NO_SPACE wherever it strikes,
the verification record included.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import grpc

from craftai_common.errors import Reason, ServiceError
from craftai_common.hashing import HashingWriter, sha256_file
from craftai_common.store import FilePin, Store, fsync_dir, mismatch_message
from craftai_prepare.full_disk import no_space
from craftai_prepare.reporter import Reporter
from craftai_prepare.sources import Source, SourceError, Timeouts

DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class FetchOutcome:
    pin: FilePin
    downloaded: bool
    source: str


def _check_present(path: Path, pin: FilePin, reporter: Reporter) -> tuple[int, str]:
    """Size and SHA-256 of the file already in place, with progress for the user. The size is the
    bytes hashed, so that a mismatch message describes the very bytes it names the hash of."""
    hashed = 0

    def progress(done: int) -> None:
        nonlocal hashed
        hashed = done
        reporter.progress("verify", done, pin.size, "bytes", f"checking {pin.name}")

    digest = sha256_file(path, progress=progress)
    return hashed, digest


def ensure_file(
    store: Store, pin: FilePin, sources: list[Source], reporter: Reporter, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> FetchOutcome:
    """Make `models/<folder>/<name>` hold exactly the pinned bytes.

    The partial file is `tmp/downloads/<sha256>.part`: a job that was killed (or lost its
    connection) resumes it from where it stopped, from the same or the next source; the final
    hash covers every byte whoever sent it, so a resumed file is checked like a fresh one.
    """
    path = store.model_path(pin)
    if path.is_file():
        size, digest = _check_present(path, pin, reporter)
        if size == pin.size and digest == pin.sha256:
            _write_record(store, pin)
            return FetchOutcome(pin, downloaded=False, source="present")
        reporter.notice(
            "FILE_MISMATCH",
            f"refused the file in the store: {mismatch_message(pin, size, digest)}; fetching the pinned file",
        )
    failures: list[str] = []
    partial = store.partial_path(pin)
    partial.parent.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if failures:
            reporter.notice("SOURCE_FAILED", f"{failures[-1]}; trying the next source")
        try:
            outcome = _fetch_from(source, store, pin, partial, reporter, timeouts)
        except _RefusedError as refused:
            failures.append(f"{source.describe()}: {refused}")
            continue
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                partial.unlink(missing_ok=True)
                raise no_space(store, f"writing {pin.name} ({pin.size:,} bytes)", file=pin.name) from exc
            failures.append(f"{source.describe()}: {exc.strerror or exc}")
            continue
        return outcome
    if partial.exists() and partial.stat().st_size == 0:
        partial.unlink()  # a non-empty partial file stays, for the next attempt to resume
    if not failures:
        failures.append("the catalogue lists no source for it")
    raise ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        Reason.SOURCES_FAILED,
        f"could not fetch {pin.name}: every source failed:\n  - " + "\n  - ".join(failures),
        metadata={"file": pin.name},
    )


class _RefusedError(Exception):
    """This source did not deliver the pinned bytes (the message says what it gave)."""


def _write_record(store: Store, pin: FilePin) -> None:
    try:
        store.write_record(pin)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise no_space(store, f"writing the verification record of {pin.name}", file=pin.name) from exc
        raise


def unsafe_path(store: Store, path: Path) -> ServiceError:
    """The plain refusal of a store path that is a symbolic link (or not a regular file)."""
    return ServiceError(
        grpc.StatusCode.FAILED_PRECONDITION,
        Reason.UNSAFE_STORE,
        f"{path} is a symbolic link or not a regular file: the store's files are never written through a link "
        f"(it could point anywhere); remove it and run the setup again (store: {store.root})",
        metadata={"path": str(path)},
    )


def _open_partial(store: Store, partial: Path) -> BinaryIO:
    """The partial file for reading and appending, created 0600 if absent, never through a link."""
    try:
        descriptor = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unsafe_path(store, partial) from exc
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise unsafe_path(store, partial)
    return os.fdopen(descriptor, "a+b")


def _fetch_from(  # noqa: PLR0917 - private helper of ensure_file
    source: Source, store: Store, pin: FilePin, partial: Path, reporter: Reporter, timeouts: Timeouts
) -> FetchOutcome:
    with _open_partial(store, partial) as f:
        writer = HashingWriter.resume(f, limit=pin.size)
        resumed_from = writer.size
        where = f" (resuming at {resumed_from:,} bytes)" if resumed_from else ""
        reporter.progress(
            "download",
            writer.size,
            pin.size,
            "bytes",
            f"fetching {pin.name} from {source.describe()}{where}",
            force=True,
        )

        def progress(done: int) -> None:
            reporter.progress("download", done, pin.size, "bytes", f"fetching {pin.name}")

        try:
            source.fetch(writer, progress, timeouts)
            f.flush()
            os.fsync(f.fileno())
        except OverflowError as exc:
            writer.restart()
            raise _RefusedError(f"refused: it sent more than the pinned {pin.size:,} bytes") from exc
        except SourceError as exc:
            raise _RefusedError(str(exc)) from exc  # the partial file stays: the next source resumes it
        if writer.size != pin.size or writer.hexdigest() != pin.sha256:
            found = mismatch_message(pin, writer.size, writer.hexdigest())
            writer.restart()
            raise _RefusedError(f"refused: {found}")
    path = store.model_path(pin)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, path)
    fsync_dir(path.parent)
    _write_record(store, pin)
    reporter.progress("download", pin.size, pin.size, "bytes", f"{pin.name} verified", force=True)
    return FetchOutcome(pin, downloaded=True, source=source.describe())
