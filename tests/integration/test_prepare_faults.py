"""The store's fault rules: crashes, a full disk, callers who leave, two replicas on one store."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, CraftAiError, SetupOutput
from craftai_dev import catalogues, servers
from craftai_dev.files import U2NETP_SHA256, U2NETP_SIZE, sha256_of

U2NETP = Path("models/u2netp/u2netp.onnx")


def _catalogue(tmp_path: Path, url: str) -> dict[str, str]:
    return {"CRAFTAI_RECIPES": str(catalogues.with_sources(tmp_path / "recipes.toml", "u2netp", [{"url": url}]))}


def _setup(address: str, engine: str = "onnxruntime", infer: str | None = None) -> SetupOutput:
    """Set u2netp up through the prepare service at `address` (the catalogue and infer at `infer`)."""
    with AiClient(app_id="tests", target=infer or address, prepare=address) as ai:
        result = list(ai.setup("image.matte", "u2netp", engine))[-1]
    assert isinstance(result, SetupOutput)
    return result


def _wait_for(condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _nothing_partial_visible(store: Path) -> None:
    model = store / U2NETP
    assert not model.exists() or sha256_of(model) == U2NETP_SHA256
    for folder in (store / "prepared").glob("*/*"):
        assert (folder / "manifest.json").is_file(), f"incomplete prepared folder {folder}"


def _in_background(
    address: str, engine: str = "onnxruntime", infer: str | None = None
) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _setup(address, engine, infer)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_prepare_killed_mid_download_resumes_after_restart(tmp_path: Path, model_files: servers.FileServer) -> None:
    url = f"{model_files.url}/drip/u2netp.onnx?{tmp_path.name}"
    services = servers.separate(tmp_path / "store", tmp_path, _catalogue(tmp_path, url))
    try:
        partial = tmp_path / "store" / "tmp" / "downloads" / f"{U2NETP_SHA256}.part"
        thread, errors = _in_background(services["prepare"].address, infer=services["infer"].address)
        _wait_for(lambda: partial.exists() and partial.stat().st_size > 1_000_000)
        services["prepare"].kill()
        thread.join(30)
        assert isinstance(errors[0], CraftAiError) and errors[0].code == grpc.StatusCode.UNAVAILABLE
        _nothing_partial_visible(tmp_path / "store")
        assert not (tmp_path / "store" / U2NETP).exists()
        kept = partial.stat().st_size
        assert 1_000_000 < kept < U2NETP_SIZE

        services["prepare"] = services["prepare"].restart()
        result = _setup(services["prepare"].address, infer=services["infer"].address)
        assert result.files[0].downloaded
        assert sha256_of(tmp_path / "store" / U2NETP) == U2NETP_SHA256
        resumed = [r for path, r in model_files.ranges if url.endswith(path) and r]
        assert resumed and int(resumed[-1][len("bytes=") : -1]) >= kept, model_files.ranges
        assert not partial.exists()
    finally:
        for process in services.values():
            process.kill()


def test_prepare_killed_mid_conversion_redoes_it_after_restart(tmp_path: Path, model_files: servers.FileServer) -> None:
    services = servers.separate(
        tmp_path / "store", tmp_path, _catalogue(tmp_path, f"{model_files.url}/good/u2netp.onnx")
    )
    store = tmp_path / "store"
    try:
        _setup(services["prepare"].address, infer=services["infer"].address)
        thread, errors = _in_background(services["prepare"].address, "torch", services["infer"].address)
        _wait_for(lambda: any(p.name.startswith("prepare-") for p in (store / "tmp").iterdir()))
        services["prepare"].kill()
        thread.join(30)
        assert errors and isinstance(errors[0], CraftAiError)
        assert not list((store / "prepared").glob("*/*")), "a prepared folder appeared from a killed conversion"

        services["prepare"] = services["prepare"].restart()
        result = _setup(services["prepare"].address, "torch", services["infer"].address)
        assert result.prepared_now
        _nothing_partial_visible(store)
        assert not [p for p in (store / "tmp").iterdir() if p.name.startswith("prepare-")]
    finally:
        for process in services.values():
            process.kill()


def test_a_caller_that_leaves_does_not_stop_the_job(tmp_path: Path, model_files: servers.FileServer) -> None:
    path = f"/drip/u2netp.onnx?{tmp_path.name}"
    url = model_files.url + path
    process = servers.embedded(tmp_path / "store", tmp_path, _catalogue(tmp_path, url))
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        events = ai.setup("image.matte", "u2netp")
        next(events)
        next(events)
        events.close()  # the caller goes away: its stream is cancelled
        result = _setup(process.address)  # the next caller joins the running job
        assert result.files[0].downloaded
        assert model_files.requests[path] == 1


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs store of a few MiB (root only: CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "store"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _resize(mount: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def test_a_full_disk_is_a_plain_error_and_the_store_works_once_space_is_freed(
    tmp_path: Path, small_disk: Path, model_files: servers.FileServer
) -> None:
    env = _catalogue(tmp_path, f"{model_files.url}/good/u2netp.onnx")
    process = servers.embedded(small_disk, tmp_path, env)
    with servers.running(process):
        with pytest.raises(CraftAiError) as caught:  # 2 MiB: the download does not fit
            _setup(process.address)
        assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and caught.value.reason == "NO_SPACE"
        assert "no space left" in caught.value.message and "nothing partial was kept" in caught.value.message
        assert not (small_disk / U2NETP).exists()
        assert not [p for p in (small_disk / "tmp").rglob("*") if p.is_file()]

        _resize(small_disk, "6m")  # the download fits, the conversion's output does not
        assert _setup(process.address).files[0].downloaded
        with pytest.raises(CraftAiError) as caught:
            _setup(process.address, "torch")
        assert caught.value.reason == "NO_SPACE" and "while preparing u2netp" in caught.value.message
        _nothing_partial_visible(small_disk)
        assert not list((small_disk / "prepared").glob("*/*"))
        assert not [p for p in (small_disk / "tmp").iterdir() if p.name.startswith("prepare-")]

        _resize(small_disk, "32m")
        assert _setup(process.address, "torch").prepared_now
        _nothing_partial_visible(small_disk)


def test_a_full_disk_while_recording_a_present_file_is_no_space(small_disk: Path, u2netp_file: Path) -> None:
    """The pinned file is in the store and checks out, but its verification record does not fit:
    NO_SPACE as for every other full disk, not INTERNAL."""
    from craftai_common.errors import ServiceError
    from craftai_common.store import FilePin, Store
    from craftai_prepare.downloads import ensure_file
    from craftai_prepare.reporter import Reporter

    _resize(small_disk, "8m")
    store = Store(small_disk)
    store.ensure()
    pin = FilePin("u2netp", "u2netp.onnx", U2NETP_SIZE, U2NETP_SHA256)
    store.model_path(pin).parent.mkdir(parents=True)
    store.model_path(pin).write_bytes(u2netp_file.read_bytes())
    filler = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(filler, b"\0" * 4096):
            pass
    except OSError:
        pass  # the disk is full
    finally:
        os.close(filler)
    with pytest.raises(ServiceError) as caught:
        ensure_file(store, pin, [], Reporter(lambda _event: None))
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "NO_SPACE")
    assert "verification record of u2netp.onnx" in caught.value.message
    assert not store.record_path(pin).exists()  # nothing half-written


def test_two_prepare_replicas_on_one_store_download_once(tmp_path: Path, model_files: servers.FileServer) -> None:
    path = f"/slow/u2netp.onnx?{tmp_path.name}"
    url = model_files.url + path
    env = _catalogue(tmp_path, url)
    services = servers.separate(tmp_path / "store", tmp_path, env)
    twin = servers.start(
        "prepare-2",
        [str(servers.BIN / "craftai-prepare")],
        {"CRAFTAI_STORE": str(tmp_path / "store"), "CRAFTAI_CATALOGUE_ADDRESS": services["catalogue"].address, **env},
        tmp_path,
    )
    try:
        results: list[SetupOutput] = []
        threads = [
            threading.Thread(target=lambda a=address: results.append(_setup(a, infer=services["infer"].address)))
            for address in (services["prepare"].address, twin.address)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(results) == 2
        assert model_files.requests[path] == 1  # the store's lock: one download for both replicas
        assert sorted(r.files[0].downloaded for r in results) == [False, True]
        assert sha256_of(tmp_path / "store" / U2NETP) == U2NETP_SHA256
    finally:
        twin.kill()
        for process in services.values():
            process.kill()
