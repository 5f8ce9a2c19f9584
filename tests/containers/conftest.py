"""Fixtures of the container suite: the images (built once per session), a network, the store volume,
a file server container standing in for the model sources, and the three services.

Docker must answer: tools/test.sh installs and starts the engine (tools/docker/engine.sh). Without
one the suite fails, unless CRAFTAI_ALLOW_NO_DOCKER=1 says to skip it (on a machine without root).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from craftai_dev import catalogues
from tests.containers import stack as st
from tools.docker.dockercli import engine_answers

# Ryuk (testcontainers' reaper) is an image from a registry, and none is reachable: the fixtures
# remove what they start instead. testcontainers reads this when it first starts a container.
os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"


def _skip_allowed() -> bool:
    return os.environ.get("CRAFTAI_ALLOW_NO_DOCKER", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session", autouse=True)
def docker_stage() -> None:
    """tools/test.sh installs the engine and builds the images beside the other suites, and writes
    the file named by CRAFTAI_DOCKER_STAGE_DONE when that is over: this suite waits for it (its
    outcome is tools/test.sh's to report; the fixtures below check the engine and the images)."""
    done = os.environ.get("CRAFTAI_DOCKER_STAGE_DONE")
    if not done:
        return
    deadline = time.monotonic() + 1800
    while not os.path.exists(done):
        if time.monotonic() > deadline:
            pytest.fail(f"the Docker stage of tools/test.sh did not finish within 30 minutes ({done})", pytrace=False)
        time.sleep(1)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    if engine_answers():
        return
    reason = "no Docker engine answers `docker info` (tools/docker/engine.sh installs and starts one, as root)"
    if not _skip_allowed():
        pytest.fail(reason + "; set CRAFTAI_ALLOW_NO_DOCKER=1 to skip the container suite", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def images(docker_engine: None) -> dict[str, str]:
    """name -> tag of the CPU images, built from this checkout (cached: see tools/docker)."""
    from tools.docker.build import build_all

    return {name: built.tag for name, built in build_all().items()}


@pytest.fixture(scope="session")
def docker_client(docker_engine: None) -> Iterator[Any]:
    import docker  # type: ignore[import-untyped]

    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="session")
def network(docker_engine: None) -> Iterator[Network]:
    with Network() as net:
        yield net


@pytest.fixture(scope="session")
def source_files(u2netp_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("container-files")
    shutil.copyfile(u2netp_file, root / "u2netp.onnx")
    return root


@pytest.fixture(scope="session")
def files(images: dict[str, str], network: Network, source_files: Path) -> Iterator[DockerContainer]:
    """The model sources: http://files:8080/good/u2netp.onnx and /stall/ (fileserver.py)."""
    server = st.file_server(images["catalogue"], network, source_files)
    server.start()
    yield server
    st.stop(server)


def recipes_with(tmp_path_factory: pytest.TempPathFactory, url: str) -> Path:
    """The real recipe data with u2netp fetched from `url` (mounted into a catalogue container)."""
    path = tmp_path_factory.mktemp("container-recipes") / "recipes.toml"
    catalogues.with_sources(path, "u2netp", [{"url": url}])
    path.chmod(0o644)
    return path


@pytest.fixture(scope="session")
def store_volume(docker_client: Any) -> Iterator[str]:
    with st.docker_volume(docker_client, "craftai-test-store") as name:
        yield name


@pytest.fixture(scope="session")
def services(
    images: dict[str, str],
    network: Network,
    store_volume: str,
    files: DockerContainer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[st.Stack]:
    """catalogue, prepare and infer on the network, with a fresh store; u2netp from the file server."""
    recipes = recipes_with(tmp_path_factory, f"http://files:{st.FILES_PORT}/good/u2netp.onnx")
    running = st.stack(images, network, store_volume, recipes)
    try:
        yield running
    finally:
        for container in (running.infer, running.prepare, running.catalogue):
            st.stop(container)
