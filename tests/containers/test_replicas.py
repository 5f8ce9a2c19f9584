"""Two infer replicas behind one DNS name, as `docker compose up --scale infer=2` or a Kubernetes
headless Service runs them (docs/DEPLOY.md, Scaling), on one store with their own catalogue and
prepare, driven by 4 clients over 2 apps inside a container of the network (replica_load.py; the
throughput figure by 8).

The tests run in file order on one pool: the spread (every session's prompts answered by the
replica that encoded it, the mattes shared), then one replica killed under that load (no call
fails; only its sessions are encoded again), then a replica stopped with SIGTERM while a call is in
flight (it finishes that call and gets no new one). What each replica did is read from its own
metrics (and, for the stopped one, its log). Last, opt-in (CRAFTAI_BENCH_REPLICAS), the figure of
docs/PERFORMANCE.md: throughput with one replica and with two.

Cost: the SAM encoder (once per opened picture, a few seconds each on one CPU thread) is most of it,
and the killed replica's sessions are encoded again on the survivor: 4 clients, 2 clicks and 2 mattes
each, are enough for the checks (the CI times: docs/figures/).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from craftai import AiClient
from craftai_dev import catalogues, segment
from craftai_dev.sam_fixture import Sam21Fixture
from craftai_dev.servers import free_port
from craftai_wire.v1 import common_pb2
from tests.containers import stack as st

pytestmark = pytest.mark.containers

POOL = "pool-infer"  # the one DNS name of both replicas
# 4 clients over 2 apps for the checks (sessions on both replicas, 2 lost when one is killed); the
# figure's 8 (BENCH_CLIENTS), as docs/PERFORMANCE.md measured it
CLIENTS, BENCH_CLIENTS, APPS = 4, 8, ("editor", "batch-tool")
CLICKS, MATTES = 2, 2  # per client in the first phase (the encoder, once per client, is the cost)
LOAD_SCRIPT = Path(__file__).with_name("replica_load.py")
PICTURES = ("chelsea.png", "coffee.png", "astronaut.png")
GO, STOP = "/tmp/go-failover", "/tmp/stop-failover"
ENCODES = "craftai_infer_model_requests"  # {operation="encode"}: the encoder's runs on a replica


@dataclass
class Pool:
    catalogue: DockerContainer
    prepare: DockerContainer
    replicas: list[st.Replica]
    ports: dict[str, int]

    def client(self, app_id: str, infer: str | None = None) -> AiClient:
        """From the host: the replicas' published ports as one address list (gRPC's ipv4: target)."""
        listed = "ipv4:" + ",".join(r.address for r in self.replicas)
        at = {name: f"127.0.0.1:{port}" for name, port in self.ports.items()}
        return AiClient(
            app_id, app_key=st.APP_KEY, catalogue=at["catalogue"], prepare=at["prepare"], infer=infer or listed
        )

    def by_name(self) -> dict[str, st.Replica]:
        return {st.replica_name(r.metrics()): r for r in self.replicas}

    def all_running(self) -> list[st.Replica]:
        """Start again any replica a test stopped (those are returned), and wait until each is SERVING."""
        restarted = []
        for replica in self.replicas:
            replica.container.get_wrapped_container().reload()
            if replica.container.get_wrapped_container().status != "running":
                replica.container.get_wrapped_container().start()
                restarted.append(replica)
        for replica in self.replicas:
            st.wait_serving(replica.address, 120)
        return restarted


def _place(source: Path, folder: Path) -> None:
    """A file into the served folder: a hard link where the file system allows, else a copy."""
    target = folder / source.name
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _recipes(path: Path, fixture: Sam21Fixture, url: str) -> Path:
    """The real data with the SAM fixture pinned (segment.catalogue) and u2netp, both from `url`."""
    segment.catalogue(path, fixture, url)
    data = tomllib.loads(path.read_text())
    for pinned in catalogues.recipe(data, "u2netp")["files"]:
        pinned["sources"] = [{"url": f"{url}/u2netp.onnx"}]
    catalogues.write(path, data).chmod(0o644)
    return path


@pytest.fixture(scope="module")
def pool(
    images: dict[str, str],
    network: Network,
    docker_client: Any,
    sam21_files: Sam21Fixture,
    u2netp_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pool]:
    """catalogue, prepare and two infer replicas (one CPU thread each) on a fresh store, with
    u2netp and SAM 2 tiny (the random-weight fixture, onnxruntime) set up."""
    served = tmp_path_factory.mktemp("pool-files")
    for source in (u2netp_file, sam21_files.folder / "encoder.onnx", sam21_files.folder / "decoder.onnx"):
        _place(source, served)
    served.chmod(0o755)
    recipes = _recipes(
        tmp_path_factory.mktemp("pool-recipes") / "recipes.toml", sam21_files, "http://pool-files:8080/good"
    )
    ports = {"catalogue": free_port(), "prepare": free_port()}
    infer_env = {
        "CRAFTAI_CATALOGUE_ADDRESS": f"pool-catalogue:{st.PORT}",
        "CRAFTAI_CPU_THREADS": "1",  # two replicas on a 2-core machine
        "CRAFTAI_GRACE_SECONDS": "120",  # the drain test's call in flight always finishes
    }
    with st.docker_volume(docker_client, "craftai-test-pool") as store:
        files = st.file_server(images["catalogue"], network, served, alias="pool-files")
        catalogue, prepare = st.catalogue_and_prepare(
            images, network, store, recipes, ("pool-catalogue", "pool-prepare"), f"{POOL}:{st.PORT}", ports
        )
        replicas = [st.infer_replica(images["infer-cpu"], POOL, network, store, infer_env) for _ in range(2)]
        containers = [files, catalogue, prepare, *(r.container for r in replicas)]
        st.start_all(containers)
        try:
            running = Pool(catalogue, prepare, replicas, ports)
            with running.client("tests") as ai:
                for feature, recipe in (("image.matte", "u2netp"), ("image.segment", segment.RECIPE)):
                    assert list(ai.setup(feature, recipe, "onnxruntime"))[-1].files  # type: ignore[union-attr]
            yield running
        finally:
            for container in containers:
                st.stop(container)


def _lines(container: DockerContainer) -> list[dict[str, Any]]:
    return [json.loads(line) for line in st.logs(container).splitlines() if line.startswith("{")]


def _wait(
    container: DockerContainer, done: Callable[[list[dict[str, Any]]], bool], seconds: float = 900
) -> list[dict[str, Any]]:
    """The load container's JSON lines once `done` says so (failing with its log if it ended first)."""
    deadline = time.monotonic() + seconds
    while True:
        lines = _lines(container)
        if done(lines):
            return lines
        container.get_wrapped_container().reload()
        if container.get_wrapped_container().status == "exited" or time.monotonic() > deadline:
            raise AssertionError(f"the load did not get there:\n{st.logs(container)[-6000:]}")
        time.sleep(0.5)


def _phase(lines: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((line for line in lines if line.get("phase") == name and "sessions" in line), None)


def _calls(lines: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [line for line in lines if "call" in line and line["phase"] == phase]


def _load_container(
    images: dict[str, str], network: Network, photos: dict[str, Path], **config: Any
) -> DockerContainer:
    """replica_load.py in a container of the network (started): its clients know the replicas by
    the DNS name (or the address list) of `config["infer"]` only."""
    config = {
        "infer": f"dns:///{POOL}:{st.PORT}",
        "catalogue": f"pool-catalogue:{st.PORT}",
        "prepare": f"pool-prepare:{st.PORT}",
        "app_key": st.APP_KEY,
        "apps": list(APPS),
        "clients": CLIENTS,
        "pictures": [f"/srv/pictures/{name}" for name in PICTURES],
        "recipe": segment.RECIPE,
        "engine": "onnxruntime",
        **config,
    }
    container = (
        DockerContainer(images["catalogue"])
        .with_network(network)
        .with_volume_mapping(LOAD_SCRIPT, "/srv/replica_load.py", "ro")
        .with_command(["python", "/srv/replica_load.py", json.dumps(config)])
        .with_tmpfs_mount("/tmp", "size=16m")
        .with_kwargs(read_only=True, labels={st.LABEL: "pool-load"}, healthcheck={"test": ["NONE"]})
    )
    for name in PICTURES:
        container.with_volume_mapping(photos[name], f"/srv/pictures/{name}", "ro")
    container.start()
    return container


@pytest.fixture(scope="module")
def load(pool: Pool, images: dict[str, str], network: Network, photos: dict[str, Path]) -> Iterator[DockerContainer]:
    """The clients of the first two tests (CLIENTS), through the pool's DNS name."""
    phases = [
        {"name": "spread", "clicks": CLICKS, "mattes": MATTES},
        {"name": "failover", "clicks": 1, "mattes": 1, "wait": GO, "until": STOP},
    ]
    container = _load_container(images, network, photos, phases=phases, replicas=len(pool.replicas))
    yield container
    st.stop(container)


def test_sessions_stay_on_the_replica_that_encoded_them_and_mattes_spread(pool: Pool, load: DockerContainer) -> None:
    lines = _wait(load, lambda ls: _phase(ls, "spread") is not None)
    spread = _phase(lines, "spread")
    assert spread is not None and spread["errors"] == []
    held = Counter(s["replica"] for s in spread["sessions"])
    metrics = {st.replica_name(text): text for text in (r.metrics() for r in pool.replicas)}
    assert set(held) <= set(metrics) and sum(held.values()) == CLIENTS, (held, list(metrics))
    for call in _calls(lines, "spread"):
        if call["call"] == "click":  # each prompt answered where its session was opened
            assert not call["reopened"] and call["replica"] == spread["sessions"][call["client"]]["replica"], call
    for name, text in metrics.items():
        # The encoder ran once per picture opened there, and every prompt found its session.
        assert st.metric(text, ENCODES, operation="encode") == held[name], (name, held)
        assert st.metric(text, "craftai_infer_sessions_opened") == held[name], name
        assert st.metric(text, "craftai_infer_session_lookups", result="hit") == CLICKS * held[name], name
        assert st.metric(text, "craftai_infer_session_lookups", result="miss") == 0, name
        assert st.metric(text, "craftai_infer_sessions") == held[name], name  # still open, per replica
    mattes = {name: st.metric(text, "craftai_requests", method="Matte", code="OK") for name, text in metrics.items()}
    assert sum(mattes.values()) == CLIENTS * MATTES
    assert min(mattes.values()) >= 0.3 * CLIENTS * MATTES, mattes


def test_a_replica_killed_under_load_loses_no_call_and_only_its_sessions_are_encoded_again(
    pool: Pool, load: DockerContainer
) -> None:
    lines = _wait(load, lambda ls: _phase(ls, "spread") is not None)
    spread = _phase(lines, "spread")
    assert spread is not None
    replicas = pool.by_name()
    held = Counter(s["replica"] for s in spread["sessions"])
    # The replica holding the fewest sessions, one at least: each lost session costs an encoder run.
    victim_name = min(held, key=lambda name: held[name])
    (survivor_name,) = set(replicas) - {victim_name}
    victim, survivor = replicas[victim_name], replicas[survivor_name]
    encoded_before = st.metric(survivor.metrics(), ENCODES, operation="encode")

    load.exec(["touch", GO])
    started = len(_calls(_wait(load, lambda ls: len(_calls(ls, "failover")) >= CLIENTS), "failover"))
    victim.container.get_wrapped_container().kill()  # SIGKILL in the middle of the load
    _wait(load, lambda ls: len(_calls(ls, "failover")) >= started + CLIENTS)
    load.exec(["touch", STOP])
    lines = _wait(load, lambda ls: any(line.get("done") for line in ls))

    failover = _phase(lines, "failover")
    assert failover is not None and failover["errors"] == [], failover["errors"] if failover else lines
    lost = {s["client"] for s in spread["sessions"] if s["replica"] == victim_name}
    for session in failover["sessions"]:
        assert session["replica"] == survivor_name, session
        assert session["reopened"] == (1 if session["client"] in lost else 0), session  # sent again once, if lost
    # The encoder ran again for the dead replica's sessions only (the survivor's were never touched).
    assert st.metric(survivor.metrics(), ENCODES, operation="encode") == encoded_before + len(lost)


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return int(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status)


def test_a_replica_stopped_with_sigterm_finishes_its_call_in_flight_and_gets_no_new_one(
    pool: Pool, photos: dict[str, Path]
) -> None:
    restarted = pool.all_running()  # the replica killed above comes back (a restart)
    # The one that kept running drains: it has SAM loaded already (the restarted one only needs u2netp).
    draining, other = sorted(pool.replicas, key=lambda replica: replica in restarted)
    big = st.large_picture(photos["chelsea.png"])
    in_flight_started = threading.Event()
    in_flight: dict[str, Any] = {}

    def progress(event: common_pb2.Progress) -> None:
        if event.stage == "decode":  # OpenSession's stages: decode, then encode (seconds at that size)
            in_flight_started.set()

    def slow_call() -> None:
        """A session opened on the replica that will drain: seconds of decoding and encoding."""
        try:
            with pool.client("pinned", infer=draining.address) as ai:
                session = ai.open_session(big, segment.RECIPE, "onnxruntime", on_progress=progress)
                in_flight["session"] = session.session_id
        except Exception as exc:
            in_flight["error"] = exc
        finally:
            in_flight["done"] = time.monotonic()

    with pool.client("spread") as ai:
        picture = photos["coffee.png"].read_bytes()
        served_before = [st.metric(r.metrics(), "craftai_requests", method="Matte") for r in pool.replicas]
        served = [0.0, 0.0]
        for _ in range(8):  # until both subchannels are connected and SERVING: both in this client's turn
            ai.remove_background(picture, outputs="matte", recipe="u2netp", engine="onnxruntime")
            served = [
                st.metric(r.metrics(), "craftai_requests", method="Matte") - before
                for r, before in zip(pool.replicas, served_before, strict=True)
            ]
            if min(served) >= 1:
                break
        assert min(served) >= 1, served

        caller = threading.Thread(target=slow_call)
        caller.start()
        assert in_flight_started.wait(300), in_flight
        draining.container.get_wrapped_container().kill(signal="SIGTERM")
        while _health(draining.address) != health_pb2.HealthCheckResponse.NOT_SERVING:
            time.sleep(0.05)
        time.sleep(0.5)  # the health update reaches the clients' channels
        other_before = st.metric(other.metrics(), "craftai_requests", method="Matte")
        for _ in range(6):
            ai.remove_background(picture, outputs="matte", recipe="u2netp", engine="onnxruntime")
        new_calls_done = time.monotonic()
        assert st.metric(other.metrics(), "craftai_requests", method="Matte") == other_before + 6
        caller.join(300)
    assert "error" not in in_flight and in_flight.get("session"), in_flight  # the call in flight was answered
    assert in_flight["done"] > new_calls_done, "the call in flight ended before the new calls: nothing was drained"
    draining.container.get_wrapped_container().wait(timeout=120)
    log = [json.loads(line) for line in st.logs(draining.container).splitlines() if line.startswith("{")]
    stopping = next(i for i, line in enumerate(log) if line["message"].startswith("stopping"))
    answered = [
        line
        for line in log[stopping:]
        if line.get("rpc", "").startswith("/craftai.v1.InferService/")
        and "code" in line
        and line.get("app_id") != "craftai-internal"
    ]
    assert [(line["rpc"], line["code"]) for line in answered] == [("/craftai.v1.InferService/OpenSession", "OK")], (
        answered
    )


BENCH = "CRAFTAI_BENCH_REPLICAS"  # seconds of load per configuration; unset: the figure is not measured


@pytest.mark.skipif(not os.environ.get(BENCH), reason=f"a figure, not a check: set {BENCH}=SECONDS to measure it")
def test_throughput_with_one_and_two_replicas(
    pool: Pool, images: dict[str, str], network: Network, photos: dict[str, Path]
) -> None:
    """docs/PERFORMANCE.md's figure: the same 8 clients against one replica (its address alone),
    then against both (the DNS name), in one run: prompts on their sessions for SECONDS, then mattes
    for SECONDS. Written to the JSON file named by CRAFTAI_BENCH_REPLICAS_OUT when set, and printed."""
    pool.all_running()
    seconds = float(os.environ[BENCH])
    one = f"ipv4:{pool.replicas[0].ip(network)}:{st.PORT}"
    figures: dict[str, Any] = {"cpu count": os.cpu_count()}
    for label, target in (("1 replica", one), ("2 replicas", f"dns:///{POOL}:{st.PORT}")):
        figures[f"{label}: load average at its start"] = os.getloadavg()  # other work on the machine
        container = _load_container(images, network, photos, infer=target, bench_seconds=seconds, clients=BENCH_CLIENTS)
        try:
            lines = _wait(container, lambda ls: sum("bench" in line for line in ls) == 2, 2 * seconds + 600)
        finally:
            st.stop(container)
        for bench in (line for line in lines if "bench" in line):
            assert bench["errors"] == [], bench["errors"]
            figures[f"{label}, {bench['kind']}s"] = {"per_second": bench["answered"] / bench["seconds"], **bench}
    for kind in ("clicks", "mattes"):
        figures[f"ratio, {kind}"] = (
            figures[f"2 replicas, {kind}"]["per_second"] / figures[f"1 replica, {kind}"]["per_second"]
        )
    text = json.dumps(figures, indent=2)
    print(text)
    if os.environ.get(f"{BENCH}_OUT"):
        Path(os.environ[f"{BENCH}_OUT"]).write_text(text + "\n")
