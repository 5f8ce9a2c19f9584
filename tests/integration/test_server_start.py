"""Starting and stopping a server among others, on real `craftai serve` processes: one server per
port (a second refuses to start, naming the port and the setting), one process per replica name (a
second under a name another replica answers to refuses to start), and a stop within its grace
while segment everything runs (it used to wait for the grid batch on the model's worker)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from craftai import AiClient, CraftAiError, Retries
from craftai_dev import servers
from craftai_dev.segment import SetUpStore

pytestmark = pytest.mark.slow
GRACE = 2.0


def _refused(store: Path, workdir: Path, env: dict[str, str]) -> str:
    """A `craftai serve` that must not start: its exit code 2, and its log."""
    with pytest.raises(RuntimeError, match="exited with 2") as refused:
        servers.embedded(store, workdir, env)
    return str(refused.value)


def test_a_second_server_on_a_port_in_use_refuses_to_start(tmp_path: Path) -> None:
    with servers.running(servers.embedded(tmp_path / "store", tmp_path / "first")) as first:
        port = first.address.rsplit(":", 1)[1]
        log = _refused(tmp_path / "store", tmp_path / "second", {"CRAFTAI_PORT": port})
        with AiClient("tests", target=first.address) as ai:
            assert ai.runtime().replica  # the first still answers, alone on its port
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in log
    assert "CRAFTAI_PORT" in log and "Traceback" not in log


def test_a_second_replica_under_a_name_in_use_refuses_to_start(tmp_path: Path) -> None:
    ports = [servers.free_port(), servers.free_port()]
    target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in ports)
    common = {"CRAFTAI_REPLICAS_TARGET": target}
    twin = {**common, "CRAFTAI_REPLICA": "twin"}
    store = tmp_path / "store"
    with servers.running(servers.embedded(store, tmp_path / "a", {**twin, "CRAFTAI_PORT": str(ports[0])})) as a:
        log = _refused(store, tmp_path / "b", {**twin, "CRAFTAI_PORT": str(ports[1])})
        other = {**common, "CRAFTAI_REPLICA": "other", "CRAFTAI_PORT": str(ports[1])}
        with servers.running(servers.embedded(store, tmp_path / "c", other)) as c:
            names = []
            for process in (a, c):
                with AiClient("tests", target=process.address) as ai:
                    names.append(ai.runtime().replica)
    assert "the replica name 'twin' (CRAFTAI_REPLICA) is already answered by the replica at" in log
    assert f"127.0.0.1:{ports[0]}" in log and "Traceback" not in log
    assert names == ["twin", "other"]


def test_a_stop_during_segment_everything_ends_within_the_grace(
    sam_store: SetUpStore, tmp_path: Path, photos: dict[str, Path]
) -> None:
    """SIGTERM while a grid batch of 256 points, every mask kept, runs on the model's worker
    (tens of seconds on these cores): the server exits 0 within its grace and a margin, and the
    call ends with an error, not an answer."""
    process = sam_store.serve(tmp_path, {"CRAFTAI_GRACE_SECONDS": str(GRACE)})
    started = threading.Event()
    outcome: list[object] = []

    def everything() -> None:
        with AiClient("tests", target=process.address, retries=Retries(attempts=0)) as ai:
            session = ai.open_session(photos["chelsea.png"])
            try:
                outcome.append(
                    session.segment_everything(
                        points_per_side=16,
                        points_per_batch=256,
                        pred_iou_thresh=0.0,
                        stability_score_thresh=0.0,
                        on_progress=lambda _progress: started.set(),
                    )
                )
            except CraftAiError as exc:
                outcome.append(exc)

    caller = threading.Thread(target=everything)
    caller.start()
    try:
        assert started.wait(120), process.logs()
        time.sleep(1.0)  # the batch is running on the worker
        asked = time.monotonic()
        process.popen.send_signal(signal.SIGTERM)
        code = process.popen.wait(60)
        took = time.monotonic() - asked
    finally:
        if process.popen.poll() is None:
            process.popen.kill()
        caller.join(120)
    print(f"stopped in {took:.1f} s (grace {GRACE} s)")
    assert code == 0, process.logs()
    assert took < GRACE + 8, process.logs()
    assert len(outcome) == 1 and isinstance(outcome[0], CraftAiError), outcome
