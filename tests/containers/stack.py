"""The service images run the way deploy/compose.yaml runs them, driven from the host.

One Docker network (services reach each other by name), one store volume shared by the three
(read-write for prepare only), read-only root filesystems with a tmpfs on /tmp, the non-root user of
the images, and their own HEALTHCHECK (probed every second here instead of every ten).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network
from testcontainers.core.wait_strategies import HealthcheckWaitStrategy, LogMessageWaitStrategy

from craftai import AiClient
from craftai_dev.servers import free_port
from craftai_wire.keys import key_line, new_key

PORT = 50051
FILES_PORT = 8080
SECOND_NS = 1_000_000_000
LABEL = "org.craftai.test"
FILESERVER = Path(__file__).with_name("fileserver.py")

# Print every file of the store with its size and SHA-256 (run inside a service container).
STORE_LISTING = """
import hashlib, json, os
found = {}
for top, _, names in os.walk("/store"):
    for name in names:
        path = os.path.join(top, name)
        with open(path, "rb") as f:
            found[os.path.relpath(path, "/store")] = [os.path.getsize(path), hashlib.sha256(f.read()).hexdigest()]
print(json.dumps(found))
"""


# The keys a deployment is given (docs/DEPLOY.md): one service key shared by the three services,
# and the app keys' hashes (here one key for every app id, as the wildcard line allows).
SERVICE_KEY = new_key()
APP_KEY = new_key()
KEYS_ENV = {"CRAFTAI_SERVICE_KEY": SERVICE_KEY, "CRAFTAI_KEYS": key_line("*", APP_KEY).strip()}


def service(
    image: str,
    alias: str,
    network: Network,
    store: str,
    *,
    store_mode: str = "ro",
    env: dict[str, str] | None = None,
    host_port: int | None = None,
) -> DockerContainer:
    """A service container as compose runs it (not started)."""
    container = (
        DockerContainer(image)
        .with_network(network)
        .with_network_aliases(alias)
        .with_volume_mapping(store, "/store", store_mode)
        .with_tmpfs_mount("/tmp", "size=256m")
        .with_envs(CRAFTAI_LOG_LEVEL="INFO", **KEYS_ENV, **(env or {}))
        .with_kwargs(
            read_only=True,
            labels={LABEL: alias},
            # The image's HEALTHCHECK command (not repeated here: Test left empty inherits it),
            # every second so that the wait below is short. The start period (as long as that wait)
            # keeps the failed probes of a slow start from counting: a service still importing torch
            # after 3 s on a busy 2-core machine is "starting", not "unhealthy"; the first probe
            # that passes ends it.
            healthcheck={
                "interval": SECOND_NS,
                "timeout": 5 * SECOND_NS,
                "retries": 3,
                "start_period": 120 * SECOND_NS,
            },
        )
        .waiting_for(HealthcheckWaitStrategy().with_startup_timeout(120).with_poll_interval(0.5))
    )
    if host_port is not None:
        # Loopback only, and a fixed port so that a restarted container answers at the same address.
        container.ports[f"{PORT}/tcp"] = ("127.0.0.1", host_port)  # type: ignore[assignment]
    return container


def file_server(image: str, network: Network, root: Path, alias: str = "files") -> DockerContainer:
    """tests/containers/fileserver.py in a container of the network, serving `root` (read-only)."""
    return (
        DockerContainer(image)
        .with_network(network)
        .with_network_aliases(alias)
        .with_volume_mapping(FILESERVER, "/srv/fileserver.py", "ro")
        .with_volume_mapping(root, "/srv/files", "ro")
        .with_command(["python", "/srv/fileserver.py", "/srv/files", str(FILES_PORT)])
        .with_kwargs(user="0:0", labels={LABEL: alias})  # pytest's folders are private to root
        .waiting_for(LogMessageWaitStrategy("serving /srv/files").with_startup_timeout(60))
    )


def start_all(containers: list[DockerContainer]) -> None:
    """Start containers together (their health waits overlap); stop them all if one fails."""
    with ThreadPoolExecutor(len(containers)) as pool:
        futures = [pool.submit(c.start) for c in containers]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        for c in containers:
            stop(c)
        raise RuntimeError(f"{len(errors)} container(s) did not start") from errors[0]


def stop(container: DockerContainer) -> None:
    """Remove a container; one already gone (or never started) needs nothing."""
    with contextlib.suppress(Exception):
        container.stop()


def logs(container: DockerContainer) -> str:
    out, err = container.get_logs()
    return (out + err).decode(errors="replace")


def serving(address: str, timeout: float = 2.0) -> bool:
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    except grpc.RpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def wait_serving(address: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not serving(address):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{address} did not report SERVING within {seconds:.0f} s")
        time.sleep(0.25)


def large_picture(photo: Path) -> bytes:
    """About 23 megapixels: seconds of decoding, resizing and encoding, time to kill or stop a server."""
    from PIL import Image

    image = Image.open(photo).convert("RGB")
    out = io.BytesIO()
    image.resize((image.width * 13, image.height * 13), Image.Resampling.BILINEAR).save(out, "JPEG", quality=85)
    return out.getvalue()


def store_listing(container: DockerContainer) -> dict[str, tuple[int, str]]:
    """Every file of the store volume (path relative to the store: size, SHA-256), read in a container."""
    result = container.exec(["python", "-c", STORE_LISTING])
    assert result.exit_code == 0, result.output.decode(errors="replace")
    return {path: (size, digest) for path, (size, digest) in json.loads(result.output).items()}


@contextmanager
def docker_volume(client: Any, prefix: str) -> Iterator[str]:
    """A fresh named volume, removed afterwards. A new volume takes the owner of the image's /store."""
    volume = client.volumes.create(name=f"{prefix}-{uuid.uuid4().hex[:8]}", labels={LABEL: prefix})
    try:
        yield str(volume.name)
    finally:
        volume.remove(force=True)


@dataclass
class Stack:
    """The three services on one network with one store, and their host addresses."""

    catalogue: DockerContainer
    prepare: DockerContainer
    infer: DockerContainer
    ports: dict[str, int] = field(default_factory=dict)

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def client(self, app_id: str) -> AiClient:
        return AiClient(
            app_id,
            app_key=APP_KEY,
            catalogue=self.address("catalogue"),
            prepare=self.address("prepare"),
            infer=self.address("infer"),
        )


def catalogue_and_prepare(
    images: dict[str, str],
    network: Network,
    store: str,
    recipes: Path,
    names: tuple[str, str],
    infer_at: str,
    ports: dict[str, int],
) -> tuple[DockerContainer, DockerContainer]:
    """The catalogue (serving `recipes`, asking infer at `infer_at`) and prepare (writing the
    store), under the aliases `names` and on the host ports `ports["catalogue"]`,
    `ports["prepare"]` (not started)."""
    catalogue = service(
        images["catalogue"],
        names[0],
        network,
        store,
        env={"CRAFTAI_RECIPES": "/etc/craftai/recipes.toml", "CRAFTAI_INFER_ADDRESS": infer_at},
        host_port=ports["catalogue"],
    ).with_volume_mapping(recipes, "/etc/craftai/recipes.toml", "ro")
    prepare = service(
        images["prepare"],
        names[1],
        network,
        store,
        store_mode="rw",
        env={"CRAFTAI_CATALOGUE_ADDRESS": f"{names[0]}:{PORT}"},
        host_port=ports["prepare"],
    )
    return catalogue, prepare


def stack(images: dict[str, str], network: Network, store: str, recipes: Path, alias_suffix: str = "") -> Stack:
    """Start catalogue, prepare and infer (aliases catalogue/prepare/infer + suffix) and wait for health."""
    names = {name: name + alias_suffix for name in ("catalogue", "prepare", "infer")}
    ports = {name: free_port() for name in names}
    catalogue, prepare = catalogue_and_prepare(
        images, network, store, recipes, (names["catalogue"], names["prepare"]), f"{names['infer']}:{PORT}", ports
    )
    running = Stack(
        catalogue=catalogue,
        prepare=prepare,
        infer=service(
            images["infer-cpu"],
            names["infer"],
            network,
            store,
            env={"CRAFTAI_CATALOGUE_ADDRESS": f"{names['catalogue']}:{PORT}"},
            host_port=ports["infer"],
        ),
        ports=ports,
    )
    start_all([running.catalogue, running.prepare, running.infer])
    return running


METRICS_PORT = 9464


@dataclass
class Replica:
    """One infer replica of a pool: its container and its host ports (gRPC and metrics)."""

    container: DockerContainer
    port: int
    metrics_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def metrics(self) -> str:
        """Its Prometheus text, read through its host port."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    def ip(self, network: Network) -> str:
        """Its address on the network (what the pool's DNS name resolves to)."""
        self.container.reload()
        networks = self.container.get_wrapped_container().attrs["NetworkSettings"]["Networks"]
        return str(networks[network.name]["IPAddress"])


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` (a counter's `_total` included) whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (name, f"{name}_total") and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def replica_name(text: str) -> str:
    """The replica's name from its metrics (craftai_infer_replica{replica=...})."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "craftai_infer_replica":
                return str(sample.labels["replica"])
    raise AssertionError("no craftai_infer_replica metric")


def infer_replica(image: str, alias: str, network: Network, store: str, env: dict[str, str]) -> Replica:
    """An infer container under a DNS alias it shares with the other replicas of its pool, with its
    metrics on a port of their own (not started)."""
    port, metrics_port = free_port(), free_port()
    env = {**env, "CRAFTAI_METRICS_PORT": str(METRICS_PORT), "CRAFTAI_METRICS_HOST": "0.0.0.0"}
    container = service(image, alias, network, store, env=env, host_port=port)
    container.ports[f"{METRICS_PORT}/tcp"] = ("127.0.0.1", metrics_port)  # type: ignore[assignment]
    return Replica(container, port, metrics_port)
