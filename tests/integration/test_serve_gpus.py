"""`craftai serve --gpus` on real processes, on the CPU (CRAFTAI_DEVICE=cpu): `--gpus 0,1` stands
for two GPUs. This process keeps the catalogue, prepare and the first replica on its port P; the
second replica is a process of its own on P+1 that sees only its GPU, under its own name, reaching
the first's catalogue; one target (`ipv4:...:P,...:P+1`) reaches both; a replica that dies is
said and the others go on; SIGTERM stops them all. `--gpus all` on a machine without GPUs is one
replica, on the CPU; a list that names a GPU twice is refused. The SDK's routing of sessions over
such a list: tests/integration/test_replica_routing.py. `--replicas-per-gpu 2`: two replicas on one GPU."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from craftai import AiClient, CraftAiError, Retries
from craftai_common.limits import memory_limit
from craftai_dev import servers
from craftai_wire import local_tls

pytestmark = pytest.mark.slow
REPLICA = "box"  # CRAFTAI_REPLICA: the replicas are box-gpu0 and box-gpu1


def _runtime(address: str) -> str:
    """The replica that answers GetRuntime at `address` ('' while none serves there)."""
    with AiClient("tests", target=address, retries=Retries(attempts=0), start_server=False) as ai:
        try:
            return ai.runtime().replica
        except CraftAiError:
            return ""


def _until(condition: Callable[[], bool], what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def _replicas_answering(ask: Callable[[], str], tries: int = 40) -> set[str]:
    """The replica names `ask` (one call through a target) answers with, tried until both
    replicas have answered: calls spread over the replicas that serve."""
    answered: set[str] = set()
    for _ in range(tries):
        answered.add(ask())
        if len(answered) == 2:
            break
    return answered


def _serve(workdir: Path, gpus: str, env: dict[str, str], *more: str) -> tuple[servers.Process, int]:
    """`craftai serve --gpus GPUS [MORE]` on the CPU, on a port P with P+1 free: (it, P)."""
    port = servers.free_ports_in_a_row(2)
    command = [str(servers.BIN / "craftai"), "serve", "--gpus", gpus, *more]
    env = {"CRAFTAI_STORE": str(workdir / "store"), "CRAFTAI_PORT": str(port), "CRAFTAI_DEVICE": "cpu", **env}
    return servers.start(f"serve-{gpus}", command, env, workdir, timeout=120), port


def test_two_gpus_are_two_replicas_behind_one_target(tmp_path: Path) -> None:
    serving, port = _serve(tmp_path, "0,1", {"CRAFTAI_REPLICA": REPLICA, "CRAFTAI_CPU_THREADS": "1"})
    first, second = f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"
    try:
        _until(lambda: _runtime(second) == f"{REPLICA}-gpu1", "the second replica serves on P+1")
        assert _runtime(first) == f"{REPLICA}-gpu0"
        (child,) = servers.replica_processes(serving.popen.pid)
        seen = servers.environment_of(child)
        assert seen["CUDA_VISIBLE_DEVICES"] == "1" and seen["CRAFTAI_REPLICA"] == f"{REPLICA}-gpu1"
        assert seen["CRAFTAI_CATALOGUE_ADDRESS"] == first and seen["CRAFTAI_STORE"] == str(tmp_path / "store")
        # the second replica said its address in the store, and the file was taken: nothing left in /tmp
        assert (tmp_path / "store" / "tmp" / "replicas").is_dir()
        assert not list((tmp_path / "store" / "tmp" / "replicas").iterdir())
        # one target reaches both: stateless calls spread over the replicas that serve
        target = f"ipv4:{first},{second}"
        assert target in serving.logs()  # said once both serve, for the clients' CRAFTAI_INFER_ADDRESS
        with AiClient("tests", target=first, infer=target, retries=Retries(attempts=0), start_server=False) as ai:
            assert _replicas_answering(lambda: ai.runtime().replica) == {f"{REPLICA}-gpu0", f"{REPLICA}-gpu1"}
        # so does an app with a key of its own, given the local server's certificate: the name the
        # certificate carries is checked, not the address list's (which names no one host)
        keyed = AiClient(
            "keyed",
            target=first,
            infer=target,
            app_key=servers.ensure_local_key(),
            root_certificates=local_tls.certificate_file(),
            retries=Retries(attempts=0),
            start_server=False,
        )
        with keyed:
            assert _replicas_answering(lambda: keyed.runtime().replica) == {f"{REPLICA}-gpu0", f"{REPLICA}-gpu1"}
        # a replica that dies is said, and the others go on
        os.kill(child, signal.SIGKILL)
        _until(lambda: f"{REPLICA}-gpu1 (GPU 1) exited" in serving.logs(), "the dead replica is said")
        assert _runtime(first) == f"{REPLICA}-gpu0" and _runtime(second) == ""
    finally:
        code = serving.stop(60)
    assert code == 0, serving.logs()
    assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text()


def test_the_web_gateway_reaches_every_replica(tmp_path: Path) -> None:
    """`serve --web --gpus 0,1`: the gateway's calls spread over both replicas (it is given their
    address list as its infer target), as an app's do; its sessions are routed as the SDK routes
    them (tests/integration/test_replica_routing.py)."""
    ready = tmp_path / "web.address"
    web = {"CRAFTAI_WEB_PORT": "0", "CRAFTAI_WEB_READY_FILE": str(ready)}
    serving, _ = _serve(tmp_path, "0,1", {"CRAFTAI_REPLICA": REPLICA, "CRAFTAI_CPU_THREADS": "1", **web}, "--web")
    try:
        _until(ready.exists, "the gateway serves")
        bearer = {"Authorization": f"Bearer {servers.ensure_local_key()}"}

        def status() -> str:
            answer = httpx.get(f"{ready.read_text().strip()}/api/v1/status", headers=bearer, timeout=60)
            assert answer.status_code == 200, answer.text
            return str(answer.json()["runtime"]["replica"])

        assert _replicas_answering(status) == {f"{REPLICA}-gpu0", f"{REPLICA}-gpu1"}
    finally:
        code = serving.stop(60)
    assert code == 0, serving.logs()


def test_no_replica_outlives_a_server_killed(tmp_path: Path) -> None:
    """`craftai serve --gpus` killed (SIGKILL: no stop of its own): its replica stops too, and its
    port is free again."""
    serving, port = _serve(tmp_path, "0,1", {"CRAFTAI_CPU_THREADS": "1"})
    try:
        _until(lambda: bool(_runtime(f"127.0.0.1:{port + 1}")), "the second replica serves on P+1")
        (child,) = servers.replica_processes(serving.popen.pid)
    finally:
        serving.kill()
    _until(lambda: not _alive(child), "the replica ends with its server", 60)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port + 1))


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_all_without_a_gpu_is_one_replica_on_the_cpu_and_a_gpu_named_twice_is_refused(tmp_path: Path) -> None:
    serving, port = _serve(tmp_path, "all", {"CUDA_VISIBLE_DEVICES": ""})
    with servers.running(serving):
        assert _runtime(f"127.0.0.1:{port}") and not servers.replica_processes(serving.popen.pid)
        assert "no GPU found; one infer replica, on the CPU" in serving.logs()
    twice = _refused("--gpus", "0,0", "--port", str(port))
    assert "names GPU 0 twice: name each GPU once" in twice and "--replicas-per-gpu N" in twice
    assert "--replicas-per-gpu needs --gpus" in _refused("--replicas-per-gpu", "2", "--port", str(port))


def _refused(*arguments: str) -> str:
    """`craftai serve ARGUMENTS`, which must refuse to start: what it said."""
    done = subprocess.run(
        [str(servers.BIN / "craftai"), "serve", *arguments], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_several_replicas_share_one_gpu(tmp_path: Path) -> None:
    """`--gpus 0 --replicas-per-gpu 2`: a second process on the same GPU, under a name of its own,
    reached through the one target as a second GPU's replica is."""
    serving, port = _serve(
        tmp_path, "0", {"CRAFTAI_REPLICA": REPLICA, "CRAFTAI_CPU_THREADS": "1"}, "--replicas-per-gpu", "2"
    )
    first, second = f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"
    with servers.running(serving):
        _until(lambda: _runtime(second) == f"{REPLICA}-gpu0-2", "the GPU's second replica serves on P+1")
        (child,) = servers.replica_processes(serving.popen.pid)
        seen = servers.environment_of(child)
        assert seen["CUDA_VISIBLE_DEVICES"] == "0"
        # both draw on this host's memory: each sizes its budgets from half of it
        assert seen["CRAFTAI_MEMORY_LIMIT_BYTES"] == str(memory_limit()[0] // 2)
        with AiClient("tests", target=first, infer=f"ipv4:{first},{second}", retries=Retries(attempts=0)) as ai:
            assert _replicas_answering(lambda: ai.runtime().replica) == {f"{REPLICA}-gpu0", f"{REPLICA}-gpu0-2"}
        # the log says how to keep interactive apps apart from bulk ones on the shared GPU
        said = f"point the interactive apps at {first} alone and the bulk apps at ipv4:{second}"
        assert said in serving.logs(), serving.logs()
