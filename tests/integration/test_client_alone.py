"""The client alone: the SDK and the `craftai` command built as wheels from the repository (README,
"The client alone") and installed in a fresh environment without the services, where it talks to a
server and says, when none answers, that it cannot start one here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from craftai_dev import servers

REPO = Path(__file__).resolve().parents[2]


def _run(command: list[str | Path], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, check=False, env=env)


@pytest.fixture(scope="module")
def client_alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the client's two wheels and their dependencies only."""
    root = tmp_path_factory.mktemp("client-alone")
    sources = root / "src"
    for name in ("wire", "python"):  # built from a copy: nothing written into the checkout
        shutil.copytree(
            REPO / "clients" / name,
            sources / name,
            ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build", "dist"),
        )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # README's one command (without build isolation here: the build tools of this environment).
    built = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", root / "dist", sources / "wire", sources / "python"]
    )
    assert built.returncode == 0, built.stderr
    wheels = sorted((root / "dist").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["craftai", "craftai_wire"]
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run([*pip, "--python", python, "install", "-c", REPO / "constraints.txt", *wheels])
    assert installed.returncode == 0, installed.stderr
    return venv


def test_the_client_alone_talks_to_a_server(
    client_alone: Path, matte_server: servers.Process, photos: dict[str, Path], tmp_path: Path
) -> None:
    craftai = client_alone / "bin" / "craftai"
    version = _run([craftai, "--version"])
    assert version.returncode == 0 and version.stdout.startswith("craftai 0.1.0")
    alone = _run(
        [client_alone / "bin" / "python", "-c", "import importlib.util as u; print(u.find_spec('craftai_infer'))"]
    )
    assert alone.stdout.strip() == "None"  # the services are not there

    env = {**os.environ, "CRAFTAI_ADDRESS": matte_server.address}  # the test run's config folder: its key
    run = _run([craftai, "remove-background", photos["chelsea.png"], "-o", tmp_path / "out"], env=env)
    assert run.returncode == 0, run.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["chelsea.cutout.png"]  # the default output


def test_the_client_alone_cannot_start_a_server_and_says_so(client_alone: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAFTAI_")}
    port = servers.free_port()
    env.update(CRAFTAI_CONFIG_DIR=str(tmp_path / "config"), CRAFTAI_PORT=str(port))
    run = _run([client_alone / "bin" / "craftai", "setup", "image.matte"], env=env)
    assert run.returncode == 1
    assert (
        f"no craft-ai server at 127.0.0.1:{port}: start one with `craftai serve` (or set CRAFTAI_ADDRESS)" in run.stderr
    )
    assert "this installation has the client alone and cannot start one here" in run.stderr
