"""Files brought by hand for a setup (`craftai setup FEATURE ... --from PATH`, `AiClient.setup(...,
from_path=PATH)`): which files under PATH are the route's pinned files, and the messages that
stream them to the prepare service (SetupFrom).

PATH is a file, a folder (searched recursively) or a zip archive (the publisher's archive of SAM
2.1, a wheel, an archive made by hand), or a folder holding such archives. A pinned file is found
by its size and checked by its SHA-256 here, before anything is sent, so that a wrong file is said
at once and in words; the service checks every byte again while it writes them (never trusting
a caller). Its name does not matter (a browser's "model (1).onnx" is found), only its bytes.
Nothing is written on this side: an archive's members are read where they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from craftai_wire.v1 import catalogue_pb2, common_pb2, prepare_pb2
from craftai_wire.vocabulary import NoticeCode

CHUNK = 1 << 20  # bytes a message carries (the service takes at most 1 MiB a chunk)
Opener = Callable[[], contextlib.AbstractContextManager[IO[bytes]]]


@dataclass(frozen=True)
class Entry:
    """A file that may be a pinned one: a file on disk, or a member of a zip archive."""

    origin: str  # words: the path, or "archive.zip: member"
    name: str
    size: int
    open: Opener = field(repr=False, compare=False)


@dataclass(frozen=True)
class Found:
    """A pinned file found under PATH, its bytes checked."""

    pin: catalogue_pb2.PinnedFile
    origin: str
    open: Opener = field(repr=False, compare=False)


@dataclass(frozen=True)
class Search:
    """What PATH holds of a route's files: those `found`, the pins `lacking`, and in words the
    files that looked like a pinned one but are not its bytes (`refused`)."""

    found: list[Found]
    lacking: list[catalogue_pb2.PinnedFile]
    refused: list[str]


def _member_opener(archive: Path, member: str) -> Opener:
    @contextlib.contextmanager
    def opened() -> Iterator[IO[bytes]]:
        with zipfile.ZipFile(archive) as zipped, zipped.open(member) as stream:
            yield stream

    return opened


def _members(archive: Path) -> list[Entry]:
    """An archive's readable members (encrypted ones and folders left out); none when it is not a
    zip archive that opens."""
    try:
        with zipfile.ZipFile(archive) as zipped:
            infos = [i for i in zipped.infolist() if not i.is_dir() and not i.flag_bits & 0x1]
    except (zipfile.BadZipFile, OSError, ValueError):
        return []
    return [
        Entry(
            f"{archive}: {info.filename}",
            PurePosixPath(info.filename).name,
            info.file_size,
            _member_opener(archive, info.filename),
        )
        for info in infos
    ]


def _file(path: Path) -> Entry:
    return Entry(str(path), path.name, path.stat().st_size, lambda: path.open("rb"))


def entries(path: Path) -> list[Entry]:
    """Every file under `path` and every member of the zip archives among them, in name order
    (hidden names left out of a folder)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    files: list[Path] = []
    if path.is_dir():
        for root, folders, names in os.walk(path):
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            files += [Path(root) / n for n in sorted(names) if not n.startswith(".")]
    else:
        files = [path]
    found: list[Entry] = []
    for file in files:
        if not file.is_file():
            continue
        found.append(_file(file))
        if zipfile.is_zipfile(file):
            found += _members(file)
    return found


def sha256_of(entry: Entry) -> str:
    digest = hashlib.sha256()
    with entry.open() as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def search(path: Path, pins: Sequence[catalogue_pb2.PinnedFile]) -> Search:
    """The route's files under `path`: for each pin, the entries of its size are hashed (those named
    like it first) until one is its bytes."""
    candidates = entries(path)
    hashes: dict[str, str] = {}
    found: list[Found] = []
    lacking: list[catalogue_pb2.PinnedFile] = []
    refused: list[str] = []
    for pin in pins:
        sized = sorted((e for e in candidates if e.size == pin.size), key=lambda e: e.name != pin.name)
        match = None
        for entry in sized:
            digest = hashes.get(entry.origin) or hashes.setdefault(entry.origin, sha256_of(entry))
            if digest == pin.sha256:
                match = entry
                break
        if match is not None:
            found.append(Found(pin, match.origin, match.open))
            continue
        lacking.append(pin)
        for entry in candidates:
            if entry.name == pin.name:
                got = f"{entry.size:,} bytes" + (f", SHA-256 {hashes[entry.origin]}" if entry.origin in hashes else "")
                refused.append(
                    f"{entry.origin} is named like {pin.name} but is not the pinned file: expected "
                    f"{pin.size:,} bytes, SHA-256 {pin.sha256}; found {got}"
                )
    return Search(found, lacking, refused)


def described(pins: Sequence[catalogue_pb2.PinnedFile]) -> str:
    return "; ".join(f"{p.name} ({p.size:,} bytes, SHA-256 {p.sha256})" for p in pins)


def upload(route: common_pb2.RouteRef, found: Sequence[Found]) -> Iterator[prepare_pb2.SetupUpload]:
    """SetupFrom's request stream: the route, then each file's pin and its bytes in chunks, read
    as they are sent."""
    yield prepare_pb2.SetupUpload(route=prepare_pb2.SetupRequest(route=route))
    for one in found:
        pin = one.pin
        yield prepare_pb2.SetupUpload(
            file=prepare_pb2.BroughtFile(
                folder=pin.folder, name=pin.name, size=pin.size, sha256=pin.sha256, origin=one.origin
            )
        )
        with one.open() as stream:
            while block := stream.read(CHUNK):
                yield prepare_pb2.SetupUpload(chunk=block)


def bring(resolved: catalogue_pb2.ResolveRouteResponse, path: Path) -> tuple[Search, list[common_pb2.Notice]]:
    """What to bring for the resolved route from `path`, and a notice for each of its files that
    `path` lacks (the service then checks its own copy, or fetches it). ValueError when `path`
    holds none of them, naming what the route needs."""
    route = resolved.route
    pins = list(resolved.recipe.files)
    found = search(path, pins)
    what = f"{route.feature} {route.recipe} ({route.engine})"
    if not found.found:
        refused = "".join(f"; {line}" for line in found.refused)
        raise ValueError(f"{path} holds none of the files of {what}, which needs {described(pins)}{refused}")
    notices = [
        common_pb2.Notice(
            code=NoticeCode.FILE_NOT_BROUGHT,
            message=f"{path} has no {pin.name} ({pin.size:,} bytes, SHA-256 {pin.sha256}): the service checks "
            "its own copy, or fetches it",
        )
        for pin in found.lacking
    ]
    notices += [common_pb2.Notice(code=NoticeCode.FILE_NOT_BROUGHT, message=line) for line in found.refused]
    return found, notices
