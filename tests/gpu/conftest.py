"""What the GPU suites share: InSPyReNet (the randomised checkpoint) served three ways."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

import pytest

from craftai import AiClient
from craftai_dev import catalogues, servers
from craftai_dev.inspyrenet_fixture import checkpoints


@pytest.fixture(scope="session")
def inspyrenet_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, servers.Process]]:
    """One checkpoint, three servers: the CPU (the reference), the GPU in fp32, the GPU's default."""
    made = checkpoints()["random"]
    root = tmp_path_factory.mktemp("inspyrenet-cuda")
    (root / "files").mkdir()
    shutil.copyfile(made.path, root / "files" / "inspyrenet.safetensors")
    with servers.FileServer(root / "files") as files:
        data = catalogues.real_data()
        (pinned,) = catalogues.recipe(data, "inspyrenet-swinb")["files"]
        pinned.update(
            size=made.pin.size, sha256=made.pin.sha256, sources=[{"url": f"{files.url}/inspyrenet.safetensors"}]
        )
        recipes = catalogues.write(root / "recipes.toml", data)
        settings = {
            "cpu": {"CRAFTAI_DEVICE": "cpu"},
            "fp32": {"CRAFTAI_GPU_PRECISION": "fp32"},
            "auto": {"CRAFTAI_GPU_PRECISION": "auto"},
        }
        with contextlib.ExitStack() as stack:
            started: dict[str, servers.Process] = {}
            for name, env in settings.items():
                process = servers.embedded(root / name / "store", root / name, {"CRAFTAI_RECIPES": str(recipes), **env})
                started[name] = stack.enter_context(servers.running(process))
                with AiClient(app_id="tests", target=process.address) as ai:
                    list(ai.setup("image.matte", "inspyrenet-swinb"))
            yield started
