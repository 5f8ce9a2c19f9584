"""Pinned downloads: sources tried in order, size and SHA-256 checked while writing, atomic publish.

Nothing is visible under models/ until it is complete and verified: bytes go to a partial file
under tmp/ and are renamed into place only when they match the pin. A file already in place is
only checked (every byte hashed); a file that does not match is replaced by the pinned one.
"""

from __future__ import annotations

import errno
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
from craftai_common.errors import Reason, ServiceError, resource_exhausted
from craftai_common.hashing import CHUNK, HashingWriter
from craftai_common.store import FilePin, Store, fsync_dir, mismatch_message

from craftai_prepare.reporter import Reporter
from craftai_prepare.sources import Source, SourceError, Timeouts

DEFAULT_TIMEOUTS = Timeouts()

DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class FetchOutcome:
    pin: FilePin
    downloaded: bool
    source: str


def _hash_with_progress(path: Path, pin: FilePin, reporter: Reporter) -> tuple[int, str]:
    import hashlib

    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
            done += len(block)
            reporter.progress("verify", done, pin.size, "bytes", f"checking {pin.name}")
    return done, digest.hexdigest()


def _no_space(exc: OSError, pin: FilePin, store: Store) -> ServiceError:
    return resource_exhausted(
        Reason.NO_SPACE,
        f"no space left on the store's disk ({store.root}) while writing {pin.name} ({pin.size:,} bytes); "
        "nothing partial was kept; free some space and run the setup again",
        file=pin.name,
    )


def ensure_file(
    store: Store, pin: FilePin, sources: list[Source], reporter: Reporter, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> FetchOutcome:
    """Make `models/<folder>/<name>` hold exactly the pinned bytes."""
    path = store.model_path(pin)
    if path.is_file():
        size, digest = _hash_with_progress(path, pin, reporter)
        if size == pin.size and digest == pin.sha256:
            store.write_record(pin)
            return FetchOutcome(pin, downloaded=False, source="present")
        reporter.notice(
            "FILE_MISMATCH",
            f"refused the file in the store: {mismatch_message(pin, size, digest)}; fetching the pinned file",
        )
    failures: list[str] = []
    store.tmp.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if failures:
            reporter.notice("SOURCE_FAILED", f"{failures[-1]}; trying the next source")
        partial = store.tmp / f"{pin.name}.{uuid.uuid4().hex[:8]}.part"
        reporter.progress("download", 0, pin.size, "bytes", f"fetching {pin.name} from {source.describe()}", force=True)
        try:
            with partial.open("wb") as f:
                writer = HashingWriter(f, limit=pin.size)
                source.fetch(
                    writer,
                    lambda done: reporter.progress("download", done, pin.size, "bytes", f"fetching {pin.name}"),
                    timeouts,
                )
                f.flush()
                os.fsync(f.fileno())
            if writer.size != pin.size or writer.hexdigest() != pin.sha256:
                failures.append(
                    f"{source.describe()}: refused: {mismatch_message(pin, writer.size, writer.hexdigest())}"
                )
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, path)
            fsync_dir(path.parent)
            store.write_record(pin)
            reporter.progress("download", pin.size, pin.size, "bytes", f"{pin.name} verified", force=True)
            return FetchOutcome(pin, downloaded=True, source=source.describe())
        except OverflowError:
            failures.append(f"{source.describe()}: refused: it sent more than the pinned {pin.size:,} bytes")
        except SourceError as exc:
            failures.append(f"{source.describe()}: {exc}")
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _no_space(exc, pin, store) from exc
            failures.append(f"{source.describe()}: {exc.strerror or exc}")
        finally:
            partial.unlink(missing_ok=True)
    if not failures:
        failures.append("the catalogue lists no source for it")
    raise ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        Reason.SOURCES_FAILED,
        f"could not fetch {pin.name}: every source failed:\n  - " + "\n  - ".join(failures),
        metadata={"file": pin.name},
    )


__all__ = ["FetchOutcome", "ensure_file"]
