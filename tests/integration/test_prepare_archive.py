"""Pinned files taken out of a pinned zip archive (the SAM 2.1 publisher's kind of source), served by
a real HTTP server on loopback: one archive download for every file it holds, each member found by
its own pin and checked while written, the archive kept under tmp/archives/ only while needed, and
bad archives refused in plain words naming the member, the next source then tried.

Small random members (incompressible, like model weights) keep every case to milliseconds; the
real-size case, SAM 2.1 tiny from an archive laid out like the publisher's, is the sam_store
fixture (craftai_dev.segment) and test_segment.py's `craftai setup image.segment`.
"""

from __future__ import annotations

import hashlib
import stat
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from filelock import FileLock

from craftai import AiClient, SetupOutput
from craftai_common.errors import ServiceError
from craftai_common.store import FilePin, Store
from craftai_dev import catalogues, servers
from craftai_dev.stops import stopped_while_waiting
from craftai_prepare.downloads import ensure_file
from craftai_prepare.reporter import Reporter
from craftai_prepare.sources import ArchiveMemberSource, HttpSource, Source, archive_pin
from craftai_wire.v1 import common_pb2, prepare_pb2

RECIPE = "sam2.1-hiera-tiny"
WHEN = (2026, 2, 21, 12, 0, 0)


def _payload(name: str, size: int) -> bytes:
    """Deterministic incompressible bytes (a stand-in for weights)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{name}/{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


ENCODER = _payload("encoder", 300_000)
DECODER = _payload("decoder", 120_000)
CONFIG = b"type: segment_anything_2\nname: sam2.1_hiera_tiny\n" * 4


def _pin(name: str, data: bytes, folder: str = "archive-test") -> FilePin:
    return FilePin(folder, name, len(data), hashlib.sha256(data).hexdigest())


ENCODER_PIN = _pin("tiny.encoder.onnx", ENCODER)
DECODER_PIN = _pin("tiny.decoder.onnx", DECODER)


def _zip(path: Path, members: list[tuple[str, bytes]], *, mode: int = 0o644) -> Path:
    """A deflated archive with fixed timestamps (the same bytes every run)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, WHEN)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, data)
    return path


def _symlink_zip(path: Path) -> Path:
    _zip(path, [("tiny/encoder.onnx", ENCODER)])
    with zipfile.ZipFile(path, "a") as archive:
        info = zipfile.ZipInfo("tiny/latest.onnx", WHEN)
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        info.create_system = 3
        archive.writestr(info, b"encoder.onnx")
    return path


def _damaged_zip(path: Path) -> Path:
    """The encoder's compressed bytes with one byte changed (the archive pinned as it is: its CRC fails)."""
    _zip(path, [("tiny/encoder.onnx", ENCODER)])
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


GOOD_LAYOUT = [("tiny/encoder.onnx", ENCODER), ("tiny/decoder.onnx", DECODER), ("tiny/config.yaml", CONFIG)]

# name -> (how to make it, words the refusal must have)
BAD_ARCHIVES: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    "traversal": (
        lambda p: _zip(p, [*GOOD_LAYOUT, ("../../models/evil.onnx", ENCODER)]),
        ["member '../../models/evil.onnx'", "path traversal"],
    ),
    "absolute": (lambda p: _zip(p, [("/etc/tiny.encoder.onnx", ENCODER)]), ["'/etc/tiny.encoder.onnx'", "absolute"]),
    "symlink": (_symlink_zip, ["member 'tiny/latest.onnx' is a symbolic link"]),
    "larger": (
        lambda p: _zip(p, [("tiny/tiny.encoder.onnx", ENCODER + b"more")]),
        ["member 'tiny/tiny.encoder.onnx' holds 300,004 bytes, more than the 300,000 pinned for tiny.encoder.onnx"],
    ),
    "bomb": (
        lambda p: _zip(p, [*GOOD_LAYOUT, ("tiny/padding.bin", bytes(8 << 20))]),
        ["member 'tiny/padding.bin' would expand", "into 8,388,608", "compression bomb"],
    ),
    "damaged": (_damaged_zip, ["the member 'tiny/encoder.onnx' of the archive damaged.zip cannot be read: "]),
    "other-bytes": (
        lambda p: _zip(p, [("tiny/encoder.onnx", DECODER + bytes(len(ENCODER) - len(DECODER)))]),
        ["no member of the archive", "is the pinned tiny.encoder.onnx", "'tiny/encoder.onnx' has 300,000 bytes"],
    ),
    "no-member": (
        lambda p: _zip(p, [("tiny/config.yaml", CONFIG)]),
        ["holds no member of 300,000 bytes", "tiny.encoder.onnx", f"'tiny/config.yaml' ({len(CONFIG)} bytes)"],
    ),
}


@dataclass(frozen=True)
class Files:
    server: servers.FileServer
    archives: dict[str, FilePin]  # name -> the archive's pin as served

    def source(self, name: str, pin: FilePin, member: str = "tiny.encoder.onnx", served: str | None = None) -> Source:
        """An archive member source for `pin`: the archive `name` (pinned by its own bytes), served
        from /`served` (default: the same file)."""
        archive = self.archives[name]
        url = f"{self.server.url}/{served or name}.zip"
        return ArchiveMemberSource(url, archive_pin(url, archive.size, archive.sha256), member, pin)

    def direct(self, pin: FilePin) -> Source:
        return HttpSource(f"{self.server.url}/direct/{pin.name}")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Files]:
    root = tmp_path_factory.mktemp("archives")
    made = {"good": _zip(root / "good.zip", GOOD_LAYOUT)}
    for name, (make, _) in BAD_ARCHIVES.items():
        made[name] = make(root / f"{name}.zip")
    (root / "direct").mkdir()
    (root / "direct" / ENCODER_PIN.name).write_bytes(ENCODER)
    (root / "direct" / DECODER_PIN.name).write_bytes(DECODER)
    pins = {name: _pin(path.name, path.read_bytes(), "") for name, path in made.items()}
    with servers.FileServer(root) as server:
        yield Files(server, pins)


@dataclass
class Heard:
    """What a job's reporter sent, as the caller's stream would carry it."""

    events: list[prepare_pb2.SetupEvent]

    def notices(self, code: str) -> list[str]:
        return [e.notice.message for e in self.events if e.HasField("notice") and e.notice.code == code]

    def stages(self) -> list[tuple[str, str]]:
        return [(e.progress.stage, e.progress.message) for e in self.events if e.HasField("progress")]


def _ensure(store: Store, pin: FilePin, sources: list[Source]) -> tuple[Any, Heard]:
    heard = Heard([])
    outcome = ensure_file(store, pin, sources, Reporter(heard.events.append, min_interval=0.0))
    return outcome, heard


def _tmp_files(store: Store) -> list[Path]:
    return sorted(p for p in store.tmp.rglob("*") if p.is_file())


def test_a_member_is_found_by_its_pin_not_its_path(tmp_path: Path, files: Files) -> None:
    """The hint says tiny.encoder.onnx; the archive has it at tiny/encoder.onnx: its size and hash decide."""
    store = Store(tmp_path / "store")
    outcome, heard = _ensure(store, ENCODER_PIN, [files.source("good", ENCODER_PIN)])
    assert outcome.downloaded
    assert outcome.source == f"member tiny/encoder.onnx of the archive {files.server.url}/good.zip"
    assert store.model_path(ENCODER_PIN).read_bytes() == ENCODER
    stages = heard.stages()
    assert ("download", f"fetching the archive good.zip from {files.server.url}/good.zip") in stages
    assert ("extract", "tiny.encoder.onnx unpacked from good.zip") in stages
    kept = store.tmp / "archives" / f"{files.archives['good'].sha256}.zip"
    assert _tmp_files(store) == [kept]  # kept for the decoder; no partial file left
    outcome, heard = _ensure(store, DECODER_PIN, [files.source("good", DECODER_PIN, member="")])
    assert store.model_path(DECODER_PIN).read_bytes() == DECODER
    assert ("verify", "checking the archive good.zip") in heard.stages()  # not downloaded again
    assert not any(stage == "download" and "fetching" in message for stage, message in heard.stages())


@pytest.mark.parametrize("name", list(BAD_ARCHIVES))
def test_a_bad_archive_is_refused_naming_the_member_and_the_next_source_is_tried(
    tmp_path: Path, files: Files, name: str
) -> None:
    store = Store(tmp_path / "store")
    outcome, heard = _ensure(store, ENCODER_PIN, [files.source(name, ENCODER_PIN), files.direct(ENCODER_PIN)])
    assert outcome.source == f"{files.server.url}/direct/{ENCODER_PIN.name}"
    assert store.model_path(ENCODER_PIN).read_bytes() == ENCODER
    (notice,) = heard.notices("SOURCE_FAILED")
    assert notice.startswith(f"member tiny.encoder.onnx of the archive {files.server.url}/{name}.zip: ")
    assert notice.endswith("; trying the next source")
    for words in BAD_ARCHIVES[name][1]:
        assert words in notice, (words, notice)
    assert not (store.models / "archive-test" / "evil.onnx").exists()
    assert not any(p.name == "evil.onnx" for p in (tmp_path / "store").rglob("*"))


def test_an_archive_that_is_not_the_pinned_one_is_refused_before_it_is_opened(tmp_path: Path, files: Files) -> None:
    """/no-member.zip serves other (fewer) bytes than the archive pinned for that URL."""
    store = Store(tmp_path / "store")
    with pytest.raises(ServiceError) as caught:
        _ensure(store, ENCODER_PIN, [files.source("good", ENCODER_PIN, served="no-member")])
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "SOURCES_FAILED")
    good, served = files.archives["good"], files.archives["no-member"]
    assert (
        f"the archive no-member.zip: refused: no-member.zip is not the pinned file: expected {good.size:,} bytes, "
        f"SHA-256 {good.sha256}; found {served.size:,} bytes, SHA-256 {served.sha256}"
    ) in error.message
    assert not store.model_path(ENCODER_PIN).exists()
    assert not (store.tmp / "archives").exists()  # never kept, never opened
    assert _tmp_files(store) == []


def test_an_interrupted_archive_download_resumes(tmp_path: Path, files: Files) -> None:
    store = Store(tmp_path / "store")
    good = files.archives["good"]
    partial = store.partial_path(good)
    partial.parent.mkdir(parents=True)
    data = (files.server.root / "good.zip").read_bytes()
    partial.write_bytes(data[: len(data) // 2])
    before = len(files.server.ranges)
    outcome, heard = _ensure(store, ENCODER_PIN, [files.source("good", ENCODER_PIN)])
    assert outcome.downloaded
    assert ("/good.zip", f"bytes={len(data) // 2}-") in files.server.ranges[before:]
    assert any("(resuming at" in message for _, message in heard.stages())


def _catalogue(path: Path, files: Files, archive: str) -> Path:
    """The real recipe data with SAM 2.1 tiny's two files pinned to the small members, from `archive`
    (stand-in bytes: its onnxruntime route is set up without its preparation, which reads graphs)."""
    data = catalogues.without_preparation(catalogues.real_data(), RECIPE, "onnxruntime")
    for pinned in catalogues.recipe(data, RECIPE)["files"]:
        pin = ENCODER_PIN if pinned["role"] == "encoder" else DECODER_PIN
        served = files.archives[archive]
        pinned.update(
            size=pin.size,
            sha256=pin.sha256,
            sources=[
                {
                    "archive": f"{files.server.url}/{archive}.zip?{path.parent.name}",
                    "archive_size": served.size,
                    "archive_sha256": served.sha256,
                    "member": pinned["sources"][0].get("member", ""),
                },
                {"url": f"{files.server.url}/direct/{pin.name}?{path.parent.name}"},
            ],
        )
    return catalogues.write(path, data)


def test_setup_takes_every_file_from_one_download_and_forgets_the_archive(tmp_path: Path, files: Files) -> None:
    """Through the services: `setup image.segment sam2.1-hiera-tiny` with both files in one archive."""
    recipes = _catalogue(tmp_path / "recipes.toml", files, "good")
    store = tmp_path / "store"
    with (
        servers.running(servers.embedded(store, tmp_path, {"CRAFTAI_RECIPES": str(recipes)})) as process,
        AiClient(app_id="tests", target=process.address) as ai,
    ):
        events = list(ai.setup("image.segment", RECIPE, "onnxruntime"))
    result = events[-1]
    assert isinstance(result, SetupOutput)
    assert [f.source for f in result.files] == [
        f"member tiny/{role}.onnx of the archive {files.server.url}/good.zip?{tmp_path.name}"
        for role in ("encoder", "decoder")
    ]
    assert files.server.requests[f"/good.zip?{tmp_path.name}"] == 1
    progress = [e for e in events if isinstance(e, common_pb2.Progress)]
    names = [f"sam2.1_hiera_tiny.{role}.onnx" for role in ("encoder", "decoder")]
    unpacked = [p.message for p in progress if p.stage == "extract" and "unpacked" in p.message]
    assert unpacked == [f"{name} unpacked from good.zip" for name in names]  # progress for each member
    assert all(any(p.stage == "extract" and p.done < p.total and name in p.message for p in progress) for name in names)
    assert any(p.stage == "download" and p.total == files.archives["good"].size for p in progress)
    assert not [p for p in (store / "tmp").rglob("*") if p.is_file()]  # the archive is gone with the partials
    assert (store / "models" / "sam2.1-hiera-tiny" / names[0]).read_bytes() == ENCODER


# -- the archive's own files under the store's rules (issue 14: no link followed, no wait on a stop) --


def test_a_link_planted_at_the_archive_partial_download_is_refused_and_its_target_untouched(
    tmp_path: Path, files: Files
) -> None:
    store = Store(tmp_path / "store")
    store.ensure()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not the store's\n")
    partial = store.partial_path(files.archives["good"])
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.symlink_to(victim)
    with pytest.raises(ServiceError) as caught:
        _ensure(store, ENCODER_PIN, [files.source("good", ENCODER_PIN)])
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "UNSAFE_STORE")
    assert str(partial) in caught.value.message and "symbolic link" in caught.value.message
    assert victim.read_bytes() == b"not the store's\n"


def test_a_linked_archive_lock_is_refused_in_plain_words(tmp_path: Path, files: Files) -> None:
    store = Store(tmp_path / "store")
    store.ensure()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not the store's\n")
    store.lock_path(f"archive-{files.archives['good'].sha256}").symlink_to(victim)
    with pytest.raises(ServiceError) as caught:
        _ensure(store, ENCODER_PIN, [files.source("good", ENCODER_PIN)])
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "UNSAFE_STORE")
    assert "symbolic link" in caught.value.message
    assert victim.read_bytes() == b"not the store's\n"


def test_a_stop_ends_a_wait_for_another_job_archive_at_once(tmp_path: Path, files: Files) -> None:
    """Another process reads the archive (its lock held): the job waits; once the server stops it
    gives up at once with SHUTTING_DOWN (retried by the SDK), not after CRAFTAI_LOCK_WAIT_SECONDS."""
    store = Store(tmp_path / "store")
    store.ensure()
    other = FileLock(store.lock_path(f"archive-{files.archives['good'].sha256}"))
    other.acquire()
    stopping = threading.Event()
    heard = Heard([])
    reporter = Reporter(heard.events.append, min_interval=0.0)
    error, took = stopped_while_waiting(
        lambda: ensure_file(store, ENCODER_PIN, [files.source("good", ENCODER_PIN)], reporter, stopping=stopping),
        lambda: any(stage == "wait" for stage, _ in heard.stages()),
        stopping.set,
        other.release,
    )
    assert took < 2.0
    assert isinstance(error, ServiceError)
    assert (error.code, error.reason, error.retry_after) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN", 1.0)
    assert "taking files out of the archive good.zip" in error.message
    assert not store.model_path(ENCODER_PIN).exists()
