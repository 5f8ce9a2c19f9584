"""Members of zip archives (a publisher's model archive, a wheel): a dangerous archive refused
before any member is read, then one member streamed out into a pinned file's writer.

The archive is opened only after its own bytes were checked (downloads.py hashes a pinned archive
whole; pip checks a wheel). Its central directory is then read for danger, and the whole archive
is refused, in words naming the member, when one member has a path that leaves the archive's
folder (path traversal), is a symbolic link, is encrypted, or would expand far more than data
compresses (a compression bomb). Nothing is ever written at a member's path: its bytes go to the
pinned file's partial file, hashed and cut off at the pinned size while written.

Member paths are not trusted to be stable (a publisher's layout is not always confirmed): the
member wanted is the one with the pinned file's size and SHA-256, wherever it lies; the hinted
path and members named like the pinned file are only tried first. A member named like it but
larger than pinned is refused rather than skipped, so that a changed archive says so.
"""

from __future__ import annotations

import re
import stat
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

CHUNK = 1 << 20
#: A member that declares more than this many times its compressed size is a bomb (model weights
#: compress by a few percent; text by 3 to 10 times) ...
MAX_EXPANSION = 100
#: ... unless it expands to less than this (a small, very regular file is harmless).
BOMB_FLOOR = 1 << 20


class ArchiveError(Exception):
    """The archive cannot give the member; the message is plain words naming the member."""


class MemberWriter(Protocol):
    size: int

    def write(self, data: bytes) -> None: ...

    def restart(self) -> None: ...

    def hexdigest(self) -> str: ...


Progress = Callable[[int], None]  # bytes written so far


@dataclass(frozen=True)
class Wanted:
    """The member a pinned file is: `name` is the pinned file's (for words); `sha256` None takes the
    member at `hint` by its path alone (a wheel's member, checked against the pin by the caller)."""

    name: str
    size: int
    sha256: str | None
    hint: str = ""


def _why_unsafe(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    parts = re.split(r"[\\/]", name)
    if "\x00" in name:
        return "has a NUL character in its path"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "has an absolute path"
    if ".." in parts:
        return "has a path that climbs out of the archive's folder (path traversal)"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "is a symbolic link"
    if info.flag_bits & 0x1:
        return "is encrypted"
    if info.file_size > BOMB_FLOOR and info.file_size > MAX_EXPANSION * max(info.compress_size, 1):
        return (
            f"would expand {info.compress_size:,} bytes into {info.file_size:,} "
            f"(more than {MAX_EXPANSION} times: a compression bomb)"
        )
    return None


def check(archive: zipfile.ZipFile, label: str) -> None:
    """ArchiveError naming the first dangerous member; nothing is read but the central directory."""
    for info in archive.infolist():
        why = _why_unsafe(info)
        if why is not None:
            raise ArchiveError(f"refused the archive {label}: its member '{info.filename}' {why}")


def _named_like(info: zipfile.ZipInfo, wanted: Wanted) -> bool:
    base = PurePosixPath(info.filename).name
    return info.filename == wanted.hint or base in {PurePosixPath(wanted.hint).name, wanted.name}


def candidates(archive: zipfile.ZipFile, wanted: Wanted, label: str) -> list[zipfile.ZipInfo]:
    """Members that may be the wanted file, most likely first (the hinted path, then members named
    like the file, then any of its size); ArchiveError when one named like it is larger than pinned."""
    files = [info for info in archive.infolist() if not info.is_dir()]
    if wanted.sha256 is None:
        exact = [info for info in files if info.filename == wanted.hint]
        if not exact:
            raise ArchiveError(f"{label} has no member {wanted.hint}")
        return exact[-1:]
    for info in files:
        if _named_like(info, wanted) and info.file_size > wanted.size:
            raise ArchiveError(
                f"refused the archive {label}: its member '{info.filename}' holds {info.file_size:,} bytes, "
                f"more than the {wanted.size:,} pinned for {wanted.name}"
            )
    sized = [info for info in files if info.file_size == wanted.size]
    return sorted(sized, key=lambda info: (info.filename != wanted.hint, not _named_like(info, wanted)))


def copy(archive: zipfile.ZipFile, info: zipfile.ZipInfo, writer: MemberWriter, progress: Progress, label: str) -> None:
    """The member's bytes into `writer` from its start (the writer refuses more than the pin)."""
    writer.restart()
    try:
        with archive.open(info) as member:
            while block := member.read(CHUNK):
                writer.write(block)
                progress(writer.size)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        writer.restart()
        raise ArchiveError(f"the member '{info.filename}' of {label} cannot be read: {exc}") from exc


def extract(archive: zipfile.ZipFile, wanted: Wanted, writer: MemberWriter, progress: Progress, label: str) -> str:
    """The wanted member into `writer`; returns its path in the archive. The archive is checked
    first (`check`); a candidate whose bytes are not the pin's is passed over for the next."""
    check(archive, label)
    found = candidates(archive, wanted, label)
    passed: list[str] = []
    for info in found:
        copy(archive, info, writer, progress, label)
        if wanted.sha256 is None or writer.hexdigest() == wanted.sha256:
            return info.filename
        passed.append(f"'{info.filename}' has {info.file_size:,} bytes but SHA-256 {writer.hexdigest()}")
        writer.restart()
    if passed:
        raise ArchiveError(
            f"no member of {label} is the pinned {wanted.name} (SHA-256 {wanted.sha256}): " + "; ".join(passed)
        )
    listed = ", ".join(f"'{i.filename}' ({i.file_size:,} bytes)" for i in archive.infolist()[:8])
    more = f" and {len(archive.infolist()) - 8} more" if len(archive.infolist()) > 8 else ""
    raise ArchiveError(
        f"{label} holds no member of {wanted.size:,} bytes, the size pinned for {wanted.name} "
        f"(its members: {listed or 'none'}{more})"
    )


def open_zip(path: Path, label: str) -> zipfile.ZipFile:
    """The archive at `path` opened for reading; ArchiveError when it is not a zip file."""
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"{label} is not a valid zip file: {exc}") from exc


__all__ = [
    "BOMB_FLOOR",
    "MAX_EXPANSION",
    "ArchiveError",
    "Wanted",
    "candidates",
    "check",
    "copy",
    "extract",
    "open_zip",
]
