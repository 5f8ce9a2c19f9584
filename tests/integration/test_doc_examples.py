"""Every example of README.md and docs/*.md runs as written (craftai_dev.doc_examples: every python
block, the bash blocks marked to run), so that a document that drifts from the code fails here.

One `craftai serve` for the module, on a store where nothing is set up: its catalogue offers
u2netp and the SAM fixture from loopback, so an example that uses a feature must set it up itself
(as on a fresh machine); the examples run in document order, each a fresh process in a folder of
its own holding `photo.jpg` and `holidays/`, with `~/.config/craftai` the test run's (the local key
and certificate) and the documented addresses pointed at this module's server and gateway."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from craftai_dev import catalogues, doc_examples, segment, servers, web
from craftai_dev.sam_fixture import Sam21Fixture

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = doc_examples.examples(ROOT)
SECONDS = 300  # one example at most (setting both features up and a segment everything on 2 cores)


@dataclass(frozen=True)
class Stack:
    services: servers.Process
    gateway: servers.Process


@pytest.fixture(scope="module")
def stack(
    sam21_files: Sam21Fixture, model_files: servers.FileServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("doc-examples")
    with servers.FileServer(segment.served_folder(root, sam21_files)) as sam_files:
        data = tomllib.loads(segment.catalogue(root / "sam.toml", sam21_files, sam_files.url).read_text())
        for pinned in catalogues.recipe(data, "u2netp")["files"]:
            pinned["sources"] = [{"url": f"{model_files.url}/good/u2netp.onnx"}]
        recipes = catalogues.write(root / "recipes.toml", data)
        process = servers.embedded(root / "store", root / "serve", {"CRAFTAI_RECIPES": str(recipes)})
        with (
            servers.running(process) as services,
            servers.running(web.gateway(services.address, root / "web")) as gateway,
        ):
            yield Stack(services, gateway)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose ~/.config/craftai is the test run's config folder (the local key, the certificate)."""
    made = tmp_path_factory.mktemp("home")
    (made / ".config").mkdir()
    (made / ".config" / "craftai").symlink_to(os.environ[servers.CONFIG_VARIABLE], target_is_directory=True)
    return made


def _folder(path: Path, photos: dict[str, Path]) -> Path:
    """What the examples name: photo.jpg and a folder of pictures."""
    Image.open(photos["chelsea.png"]).convert("RGB").save(path / "photo.jpg", quality=90)
    (path / "holidays").mkdir()
    shutil.copyfile(photos["coffee.png"], path / "holidays" / "coffee.png")
    return path


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_example_runs(
    example: doc_examples.Example, stack: Stack, home: Path, photos: dict[str, Path], tmp_path: Path
) -> None:
    if example.not_run is not None:
        pytest.skip(f"marked not run: {example.not_run}")
    folder = _folder(tmp_path, photos)
    code = doc_examples.pointed(example.code, stack.services.address, stack.gateway.address)
    if example.language == "python":
        (folder / "example.py").write_text(code)
        command = [str(servers.BIN / "python"), "example.py"]
    else:
        (folder / "example.sh").write_text("set -euo pipefail\n" + code)
        command = ["bash", "example.sh"]
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{servers.BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "CRAFTAI_ADDRESS": stack.services.address,
        "PYTHONUNBUFFERED": "1",
    }
    ran = subprocess.run(
        command,
        check=False,
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SECONDS,
    )
    assert ran.returncode == 0, (
        f"{example.name} ({example.language}) exited with {ran.returncode}:\n"
        f"--- stdout\n{ran.stdout[-3000:]}\n--- stderr\n{ran.stderr[-6000:]}"
    )


def test_every_document_was_read_and_the_known_examples_are_found() -> None:
    """The extraction itself: README's SDK example, WEB.md's AsyncAiClient and curl examples are
    among those run (a fence or marker the reader missed would silently run nothing)."""
    run = {(e.document, e.language) for e in EXAMPLES if e.not_run is None}
    assert {("README.md", "python"), ("docs/WEB.md", "python"), ("docs/WEB.md", "bash"), ("docs/API.md", "bash")} <= run
