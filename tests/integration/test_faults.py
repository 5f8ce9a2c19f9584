"""Faults on real processes: the infer process killed mid-stream and restarted (the SDK retries and
rebuilds its session by sending the picture again), a graceful stop while a request is in progress,
and the GPU running out of memory under concurrent requests.

CRAFTAI_FAULT_INJECTION=slow-model makes every model call wait 3 s (craftai_infer/faults.py), so
that a request is surely in progress when the signal is sent."""

from __future__ import annotations

import concurrent.futures
import io
import signal
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from PIL import Image

from craftai import AiClient, CraftAiError, Retries
from craftai_dev import servers
from craftai_dev.segment import SetUpStore, mask_of
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import common_pb2, infer_pb2, infer_pb2_grpc

pytestmark = pytest.mark.slow
SLOW = {"CRAFTAI_FAULT_INJECTION": "slow-model"}


def _png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def _health(address: str, service: str = "") -> int:
    with loopback_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return int(reply.status)


def test_infer_killed_mid_stream_the_sdk_retries_and_rebuilds_its_session(
    sam_store: SetUpStore, tmp_path: Path
) -> None:
    # No slow-model here: the encoder runs for a second or more after its progress event, long enough.
    processes = servers.separate(sam_store.store, tmp_path, {"CRAFTAI_RECIPES": str(sam_store.recipes)})
    infer = processes["infer"]
    try:
        picture = _png(Image.new("RGB", (64, 48), (200, 120, 40)))
        with AiClient(
            "tests",
            catalogue=processes["catalogue"].address,
            prepare=processes["prepare"].address,
            infer=infer.address,
            retries=Retries(attempts=3, wait_seconds=120),  # a restart takes seconds here (torch, SAM)
        ) as ai:
            session = ai.open_session(picture)
            before = session.segment(points=[(20, 20, True)])

            # A stream in progress (the encoder is running) when the process is killed: UNAVAILABLE.
            with loopback_channel(infer.address) as channel:
                stream = infer_pb2_grpc.InferServiceStub(channel).OpenSession(
                    infer_pb2.OpenSessionRequest(picture=common_pb2.Picture(data=picture)),
                    metadata=servers.app_metadata(),
                    timeout=60,
                )
                for event in stream:
                    if event.progress.stage == "encode":
                        infer.kill()
                        break
                with pytest.raises(grpc.RpcError) as caught:
                    list(stream)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE

            # The SDK's next prompt meets a dead server, waits for it, finds the session forgotten
            # by the restart, sends the picture again and answers: the app sees a slower prompt.
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                prompt = pool.submit(session.segment, points=[(20, 20, True)])
                time.sleep(1.0)
                assert not prompt.done()
                restarted = infer.restart()
                try:
                    after = prompt.result(timeout=120)
                finally:
                    processes["infer"] = restarted
            assert after.reopened and session.reopened == 1
            assert after.best.png == before.best.png
            assert mask_of(after.best.png).shape == (48, 64)
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
    assert codes == {"catalogue": 0, "prepare": 0, "infer": 0}, codes


def test_sigterm_lets_the_request_in_progress_finish_and_refuses_new_ones(
    tmp_path: Path, local_catalogue: Path, photos: dict[str, Path]
) -> None:
    env = {"CRAFTAI_RECIPES": str(local_catalogue), "CRAFTAI_GRACE_SECONDS": "30", **SLOW}
    process = servers.embedded(tmp_path / "store", tmp_path, env)
    try:
        with AiClient("tests", target=process.address, retries=Retries(attempts=0)) as ai:
            list(ai.setup("image.matte", "u2netp"))
            in_model = threading.Event()

            def progress(event: common_pb2.Progress) -> None:
                if event.stage == "model":
                    in_model.set()

            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                slow = pool.submit(ai.remove_background, photos["chelsea.png"], on_progress=progress)
                assert in_model.wait(60)
                process.popen.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + 10
                while _health(process.address) != health_pb2.HealthCheckResponse.NOT_SERVING:
                    assert time.monotonic() < deadline, "health did not turn NOT_SERVING"
                    time.sleep(0.05)
                assert _health(process.address, "craftai.v1.InferService") == health_pb2.HealthCheckResponse.NOT_SERVING
                with pytest.raises(CraftAiError) as refused:
                    ai.runtime()
                assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
                assert refused.value.retry_after is not None and not slow.done()
                result = slow.result(timeout=60)
            assert (result.width, result.height) == (451, 300)
        assert process.popen.wait(60) == 0
    finally:
        process.kill()
    logs = process.logs()
    assert '"code": "UNAVAILABLE"' in logs and "/craftai.v1.InferService/Matte OK" in logs


def test_the_gpu_running_out_of_memory_under_concurrent_requests(
    tmp_path: Path, local_catalogue: Path, photos: dict[str, Path]
) -> None:
    """Six requests at once on a fresh server whose (simulated) GPU fails its first call: every one
    is answered, on the CPU, with the same matte; one notice; the service goes on."""
    env = {"CRAFTAI_RECIPES": str(local_catalogue), "CRAFTAI_FAULT_INJECTION": "gpu-oom-once"}
    process = servers.embedded(tmp_path / "store", tmp_path, env)
    with servers.running(process), AiClient("tests", target=process.address) as ai:
        list(ai.setup("image.matte", "u2netp"))
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda _: ai.remove_background(photos["chelsea.png"], outputs="matte"), range(6)))
        assert {r.matte_png for r in results} == {results[0].matte_png}
        notices = [n for r in results for n in r.notices]
        assert len(notices) == 1 and "the GPU failed" in notices[0]
        assert {r.device for r in results} <= {"cpu", "cuda:0"} and results[-1].width == 451
        (loaded,) = ai.runtime().loaded
        assert loaded.device == "cpu"
        assert _health(process.address) == health_pb2.HealthCheckResponse.SERVING
        assert ai.remove_background(photos["chelsea.png"], outputs="matte").notices == []
