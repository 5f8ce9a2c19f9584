"""The store's files are never written through a planted link, and a setup waiting for another
process's lock does not hold up a stop (docs/STORE.md, docs/SECURITY.md). Real files, a real HTTP
source on loopback, the real setup job (prepare's setup_job.run_setup). The full disk while recording a
present file: tests/integration/test_prepare_faults.py."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from craftai_common.errors import ServiceError
from craftai_common.store import FilePin, Store
from craftai_dev import servers
from craftai_dev.files import U2NETP_SHA256, U2NETP_SIZE
from craftai_dev.stops import stopped_while_waiting
from craftai_prepare.downloads import ensure_file
from craftai_prepare.reporter import Reporter
from craftai_prepare.setup_job import run_setup
from craftai_prepare.sources import HttpSource, Timeouts
from craftai_wire.v1 import catalogue_pb2, common_pb2, prepare_pb2

PIN = FilePin("u2netp", "u2netp.onnx", U2NETP_SIZE, U2NETP_SHA256)
SOMEONE_ELSES = b"a file the store has no business writing\n"


def _reporter(events: list[prepare_pb2.SetupEvent] | None = None) -> Reporter:
    return Reporter((events if events is not None else []).append)


def _resolved(url: str) -> catalogue_pb2.ResolveRouteResponse:
    pinned = catalogue_pb2.PinnedFile(
        folder=PIN.folder, name=PIN.name, size=PIN.size, sha256=PIN.sha256, sources=[catalogue_pb2.Source(url=url)]
    )
    return catalogue_pb2.ResolveRouteResponse(
        route=common_pb2.RouteRef(feature="image.matte", recipe="u2netp", engine="onnxruntime"),
        recipe=catalogue_pb2.Recipe(name="u2netp", feature="image.matte", files=[pinned]),
        chosen=catalogue_pb2.Route(engine="onnxruntime"),
    )


def test_a_link_planted_at_the_partial_download_is_refused_and_its_target_untouched(
    tmp_path: Path, model_files: servers.FileServer
) -> None:
    store = Store(tmp_path / "store")
    store.ensure()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(SOMEONE_ELSES)
    store.partial_path(PIN).parent.mkdir(parents=True, exist_ok=True)
    store.partial_path(PIN).symlink_to(victim)
    with pytest.raises(ServiceError) as caught:
        ensure_file(store, PIN, [HttpSource(f"{model_files.url}/good/u2netp.onnx")], _reporter(), Timeouts())
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "UNSAFE_STORE")
    assert "symbolic link" in caught.value.message and str(store.partial_path(PIN)) in caught.value.message
    assert victim.read_bytes() == SOMEONE_ELSES
    assert not store.model_path(PIN).exists()


def test_a_linked_lock_file_is_refused_in_plain_words(tmp_path: Path, model_files: servers.FileServer) -> None:
    store = Store(tmp_path / "store")
    store.ensure()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(SOMEONE_ELSES)
    store.lock_path("image.matte/u2netp/onnxruntime").symlink_to(victim)
    with pytest.raises(ServiceError) as caught:
        run_setup(store, _resolved(f"{model_files.url}/good/u2netp.onnx"), _reporter(), Timeouts(), 5.0)
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "UNSAFE_STORE")
    assert "symbolic link" in caught.value.message and "internal error" not in caught.value.message
    assert victim.read_bytes() == SOMEONE_ELSES


def test_a_stopping_server_does_not_wait_on_another_process_lock(
    tmp_path: Path, model_files: servers.FileServer
) -> None:
    """The job waits while another process holds the route's lock; once the server stops, it gives
    up at once with SHUTTING_DOWN (the SDK retries that), never waiting out CRAFTAI_LOCK_WAIT_SECONDS."""
    from filelock import FileLock

    from craftai_prepare.jobs import JobRegistry

    store = Store(tmp_path / "store")
    store.ensure()
    other = FileLock(store.lock_path("image.matte/u2netp/onnxruntime"))
    other.acquire()
    jobs = JobRegistry()
    events: list[prepare_pb2.SetupEvent] = []
    error, took = stopped_while_waiting(
        lambda: run_setup(
            store,
            _resolved(f"{model_files.url}/good/u2netp.onnx"),
            _reporter(events),
            Timeouts(),
            3600.0,
            jobs.stopping,
        ),
        lambda: any(e.progress.stage == "wait" for e in events),
        jobs.stop_waiting,
        other.release,
    )
    assert took < 2.0
    assert isinstance(error, ServiceError)
    assert (error.code, error.reason, error.retry_after) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN", 1.0)
    assert not store.model_path(PIN).exists()
