"""The model store on disk (docs/STORE.md).

    <store>/models/<folder>/<file>               downloaded bytes, exactly as published
    <store>/models/<folder>/.verified/<file>.json what prepare verified (size, SHA-256, mtime)
    <store>/prepared/<folder>/<revision>/...      made on this machine from models/<folder>
    <store>/locks/, <store>/tmp/                  cross-process locks; partial files

The verification record lets the catalogue report "downloaded and verified" without reading
model bytes: it is trusted only while the file's size and modification time are unchanged.
The infer service never trusts it: it hashes what it loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from craftai_common.hashing import sha256_file
from craftai_wire.files import replace_text


@dataclass(frozen=True)
class FilePin:
    """A published file pinned by size and SHA-256."""

    folder: str
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class VerifiedRecord:
    size: int
    sha256: str
    mtime_ns: int
    verified_at: float


@dataclass(frozen=True)
class FileCheck:
    """What was found at a pinned file's path."""

    present: bool
    verified: bool
    size: int
    sha256: str
    detail: str


class Store:
    """Paths and small atomic operations of one store folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def prepared(self) -> Path:
        return self.root / "prepared"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def ensure(self) -> None:
        for folder in (self.models, self.prepared, self.locks, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)

    def model_path(self, pin: FilePin) -> Path:
        return self.models / pin.folder / pin.name

    def record_path(self, pin: FilePin) -> Path:
        return self.models / pin.folder / ".verified" / f"{pin.name}.json"

    def prepared_dir(self, folder: str, key: str) -> Path:
        return self.prepared / folder / key

    def prepared_place(self, revision: str, sources: Sequence[FilePin]) -> tuple[str, Path]:
        """The key and folder of a route's prepared output: `prepared/<folder>/<key>/`, beside the
        folder of its first source file (never inside it), the key naming the converter's revision
        and the sources' hashes (`prepared_key`). The one place the catalogue, prepare and infer
        find it."""
        if not sources:
            raise ValueError("a route without source files has nothing to prepare")
        key = prepared_key(revision, sources)
        return key, self.prepared_dir(sources[0].folder, key)

    @property
    def downloads(self) -> Path:
        """Partial downloads, named by the pinned SHA-256 so that a restarted job resumes them."""
        return self.tmp / "downloads"

    def partial_path(self, pin: FilePin) -> Path:
        return self.downloads / f"{pin.sha256}.part"

    def lock_path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in key)
        return self.locks / f"{safe}.lock"

    def new_tmp_dir(self, prefix: str) -> Path:
        self.tmp.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.tmp))

    # -- verification records ------------------------------------------------------------

    def write_record(self, pin: FilePin) -> None:
        """Record that the file at the pin's path was verified now (atomically)."""
        path = self.model_path(pin)
        record = VerifiedRecord(pin.size, pin.sha256, path.stat().st_mtime_ns, time.time())
        target = self.record_path(pin)
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_text(target, json.dumps(asdict(record)))

    def read_record(self, pin: FilePin) -> VerifiedRecord | None:
        try:
            data = json.loads(self.record_path(pin).read_text())
            return VerifiedRecord(**data)
        except (OSError, ValueError, TypeError):
            return None

    def check_by_record(self, pin: FilePin) -> FileCheck:
        """Cheap check (no model bytes read): stat and the verification record."""
        path = self.model_path(pin)
        try:
            st = path.stat()
        except FileNotFoundError:
            return FileCheck(False, False, 0, "", "missing")
        record = self.read_record(pin)
        verified = (
            record is not None
            and record.sha256 == pin.sha256
            and record.size == pin.size == st.st_size
            and record.mtime_ns == st.st_mtime_ns
        )
        if verified:
            return FileCheck(True, True, st.st_size, pin.sha256, "verified")
        if st.st_size != pin.size:
            detail = f"{st.st_size:,} bytes where {pin.size:,} are pinned"
        else:
            detail = "not verified since it was written"
        return FileCheck(True, False, st.st_size, "", detail)

    def check_by_hash(self, pin: FilePin) -> FileCheck:
        """Full check: size, then SHA-256 of every byte."""
        path = self.model_path(pin)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return FileCheck(False, False, 0, "", "missing")
        if size != pin.size:
            return FileCheck(True, False, size, "", mismatch_message(pin, size, None))
        digest = sha256_file(path)
        if digest != pin.sha256:
            return FileCheck(True, False, size, digest, mismatch_message(pin, size, digest))
        return FileCheck(True, True, size, digest, "verified")


def mismatch_message(pin: FilePin, size: int, sha256: str | None) -> str:
    """Plain words naming what was expected and what was found."""
    found = f"{size:,} bytes" + (f", SHA-256 {sha256}" if sha256 else "")
    return f"{pin.name} is not the pinned file: expected {pin.size:,} bytes, SHA-256 {pin.sha256}; found {found}"


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- the prepared cache ----------------------------------------------------------------------

MANIFEST = "manifest.json"


def prepared_key(revision: str, sources: Sequence[FilePin]) -> str:
    """The cache key of a prepared folder: the converter's revision and the hashes of its sources.

    A new pin or a new converter revision gives a new key, so a folder made from other bytes or
    by another converter is never reused.
    """
    digest = hashlib.sha256("\n".join(f"{p.name}:{p.sha256}" for p in sorted(sources, key=lambda p: p.name)).encode())
    return f"{revision}-{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class OutputRecord:
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What a prepared folder holds and what it was made from (written last, inside the folder)."""

    key: str
    revision: str
    sources: dict[str, str]  # source file name -> SHA-256
    outputs: dict[str, OutputRecord]  # output file name -> size, SHA-256
    made_with: dict[str, str] = field(default_factory=dict)  # e.g. torch, onnx versions
    verification: dict[str, float] = field(default_factory=dict)  # measured differences vs the source
    created_at: float = 0.0
    # Files of other routes the preparation checked itself against (name -> SHA-256), and, in plain
    # words, what it could not check (no such file on disk then): the route's status says so.
    checked_against: dict[str, str] = field(default_factory=dict)
    unverified: str = ""
    # The recipe's settings of the source files it was made with (file name -> setting -> value).
    settings: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        data["outputs"] = {name: OutputRecord(**record) for name, record in data["outputs"].items()}
        return cls(**data)


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest of a prepared folder, or None where there is none it can read."""
    try:
        return Manifest.from_json((folder / MANIFEST).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def check_prepared(folder: Path, key: str, sources: Sequence[FilePin], *, deep: bool) -> str | None:
    """None when `folder` is a complete prepared folder for `key`; otherwise what is wrong.

    Shallow: the manifest names this key and these sources. Deep: every output is hashed too
    (what infer does before loading, and prepare before saying a route is already prepared).
    """
    try:
        manifest = Manifest.from_json((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "not prepared"
    except (OSError, ValueError, TypeError, KeyError) as exc:
        return f"its manifest is unreadable ({exc})"
    if manifest.key != key:
        return f"it was prepared as {manifest.key}, not {key}"
    expected = {p.name: p.sha256 for p in sources}
    if manifest.sources != expected:
        return "it was prepared from other source files"
    for name, record in manifest.outputs.items():
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return f"{name} is missing"
        if size != record.size:
            return f"{name} has {size:,} bytes where its manifest says {record.size:,}"
        if deep and (digest := sha256_file(path)) != record.sha256:
            return f"{name} has SHA-256 {digest} where its manifest says {record.sha256}"
    return None
