"""One set of services with both features set up, one gateway and one browser for the web suites."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from craftai import AiClient
from craftai_dev import catalogues, servers, web
from craftai_dev.segment import SetUpStore

API_APP = "api-tests"  # the API tests' app id (the page uses the gateway's default, craftai-web)


@pytest.fixture(scope="session")
def services(
    sam_store: SetUpStore, model_files: servers.FileServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[servers.Process]:
    """`craftai serve` with image.segment (SAM fixture) and image.matte (u2netp, set up now
    through its prepare service); one kept picture per app (the 429 case costs no encoder run).
    BiRefNet_lite's files are fetched from a loopback path that has none: its setup fails at once
    (SOURCES_FAILED), as offline, for the page's error test."""
    root = tmp_path_factory.mktemp("web-services")
    store, recipes = web.both_features_store(
        sam_store.store, sam_store.recipes, f"{model_files.url}/good/u2netp.onnx", root
    )
    data = tomllib.loads(recipes.read_text())
    for pinned in catalogues.recipe(data, "birefnet-lite")["files"]:
        pinned["sources"] = [{"url": f"{model_files.url}/missing/{pinned['role']}"}]
    catalogues.write(recipes, data)
    env = {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_MAX_SESSIONS_PER_APP": "1"}
    with servers.running(servers.embedded(store, root, env)) as process:
        with AiClient(app_id="tests", target=process.address) as ai:
            list(ai.setup("image.matte", "u2netp"))
        yield process


@pytest.fixture(scope="session")
def gateway(services: servers.Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    with servers.running(web.gateway(services.address, tmp_path_factory.mktemp("gateway"))) as process:
        yield process


@pytest.fixture(scope="session")
def key() -> str:
    return servers.ensure_local_key()


@pytest.fixture(scope="session")
def http(gateway: servers.Process, key: str) -> Iterator[httpx.Client]:
    """The API as an app calls it: its key as a bearer token, its id in Craftai-App-Id."""
    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": API_APP}
    with httpx.Client(base_url=gateway.address, headers=headers, timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def sdk(services: servers.Process) -> Iterator[AiClient]:
    """The same services through the SDK: what the gateway's answers are compared with."""
    with AiClient(app_id=API_APP, target=services.address) as ai:
        yield ai


@pytest.fixture(scope="session")
def photo(photos: dict[str, Path]) -> Path:
    return photos["chelsea.png"]
