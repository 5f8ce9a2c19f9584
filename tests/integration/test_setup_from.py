"""A setup without the network: what a failed download says (each file, its size and SHA-256, the
`--from` command), `craftai setup ... --from PATH` (a file, a folder, a zip archive; streamed to
the prepare service, which checks every byte, places the files and prepares the route), and files
placed by hand with another owner or mode, adopted or refused with the exact fix.

One `craftai serve` whose u2netp sources all fail (as offline) serves the module; each test starts
from a store without u2netp's files."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, AsyncAiClient, CraftAiError, RouteState, SetupOutput
from craftai.calls import SETUP_FROM
from craftai.transport import MiB, new_request_id
from craftai_dev import catalogues, servers
from craftai_dev.files import U2NETP_SHA256
from craftai_wire.v1 import prepare_pb2

U2NETP_SIZE = 4_574_861
FROM_COMMAND = "craftai setup image.matte --recipe u2netp --engine onnxruntime --from PATH"
SERVICE_UID = 10001  # the images' user


@dataclass
class Offline:
    process: servers.Process
    store: Path
    recipes: Path

    def craftai(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CRAFTAI_ADDRESS": self.process.address}
        return subprocess.run(
            [str(servers.BIN / "craftai"), *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )


@pytest.fixture(scope="module")
def offline_server(model_files: servers.FileServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Offline]:
    workdir = tmp_path_factory.mktemp("offline")
    gone = [{"url": f"{model_files.url}/missing/u2netp.onnx"}]
    recipes = catalogues.with_sources(workdir / "recipes.toml", "u2netp", gone)
    process = servers.embedded(workdir / "store", workdir, {"CRAFTAI_RECIPES": str(recipes)})
    with servers.running(process):
        yield Offline(process, workdir / "store", recipes)


@pytest.fixture
def offline(offline_server: Offline) -> Offline:
    """The server, its store without u2netp's files (nor its prepared folders)."""
    for folder in (offline_server.store / "models" / "u2netp", offline_server.store / "prepared" / "u2netp"):
        shutil.rmtree(folder, ignore_errors=True)
    return offline_server


def _placed(store: Path) -> Path:
    return store / "models" / "u2netp" / "u2netp.onnx"


def test_a_failed_download_names_each_file_and_the_command_that_brings_it(offline: Offline) -> None:
    run = offline.craftai("setup", "image.matte", "--recipe", "u2netp")
    assert run.returncode == 1
    assert "could not fetch u2netp.onnx: every source failed" in run.stderr
    assert f"u2netp.onnx: {U2NETP_SIZE:,} bytes, SHA-256 {U2NETP_SHA256}; published at " in run.stderr
    assert f"its place in the store: {_placed(offline.store)}" in run.stderr  # where to put it by hand
    assert f"then run: {FROM_COMMAND}" in run.stderr
    with AiClient(app_id="tests", target=offline.process.address) as ai, pytest.raises(CraftAiError) as raised:
        list(ai.setup("image.matte", "u2netp"))
    assert raised.value.reason == "SOURCES_FAILED" and FROM_COMMAND in raised.value.message


def test_setup_from_a_file_a_folder_and_an_archive(
    offline: Offline, u2netp_file: Path, tmp_path: Path, photos: dict[str, Path]
) -> None:
    folder = tmp_path / "downloads"
    (folder / "deeper").mkdir(parents=True)
    shutil.copyfile(u2netp_file, folder / "deeper" / "model (1).onnx")  # found by its bytes, not its name
    (folder / "notes.txt").write_text("not a model")
    archive = tmp_path / "u2netp-files.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.write(u2netp_file, "some/where/u2netp.onnx")
        zipped.writestr("README", "the model")
    for path, origin in ((u2netp_file, str(u2netp_file)), (folder, "model (1).onnx"), (archive, "some/where")):
        shutil.rmtree(offline.store / "models" / "u2netp", ignore_errors=True)
        run = offline.craftai("setup", "image.matte", "--recipe", "u2netp", "--from", str(path))
        assert run.returncode == 0, run.stderr
        assert "image.matte u2netp (onnxruntime): set up in" in run.stdout
        assert f"from brought: {path}" in run.stdout and origin in run.stdout
        assert "receive" in run.stderr and "\r" not in run.stderr  # plain progress lines, not a terminal
        assert hashlib.sha256(_placed(offline.store).read_bytes()).hexdigest() == U2NETP_SHA256
    assert list((offline.store / "tmp" / "uploads").iterdir()) == []  # nothing left behind
    with AiClient(app_id="tests", target=offline.process.address) as ai:
        (state,) = [s for s in ai.status("image.matte", "u2netp") if s.route.engine == "onnxruntime"]
        assert state.state in (RouteState.PREPARED, RouteState.READY)
        assert ai.remove_background(photos["chelsea.png"]).width == 451  # infer loads what was brought


def test_a_route_that_needs_preparation_is_prepared_from_files_brought(offline: Offline, u2netp_file: Path) -> None:
    run = offline.craftai("setup", "image.matte", "--recipe", "u2netp", "--engine", "torch", "--from", str(u2netp_file))
    assert run.returncode == 0, run.stderr
    assert "prepared revision u2netp-torch.1-" in run.stdout and "(prepared now)" in run.stdout


def test_the_async_client_brings_files_too(offline: Offline, u2netp_file: Path) -> None:
    async def setup() -> list[object]:
        async with AsyncAiClient(app_id="tests", target=offline.process.address) as ai:
            return [event async for event in ai.setup("image.matte", "u2netp", from_path=u2netp_file)]

    events = asyncio.run(setup())
    result = events[-1]
    assert isinstance(result, SetupOutput) and result.files[0].source == f"brought: {u2netp_file}"


def test_a_wrong_file_is_refused_before_a_byte_is_sent(offline: Offline, u2netp_file: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "u2netp.onnx"
    data = bytearray(u2netp_file.read_bytes())
    data[1000:1010] = b"0123456789"
    wrong.write_bytes(bytes(data))
    run = offline.craftai("setup", "image.matte", "--recipe", "u2netp", "--from", str(tmp_path))
    assert run.returncode == 2
    assert f"{tmp_path} holds none of the files of image.matte u2netp (onnxruntime)" in run.stderr
    assert f"{wrong} is named like u2netp.onnx but is not the pinned file: expected {U2NETP_SIZE:,} bytes" in (
        run.stderr
    )
    missing = offline.craftai("setup", "image.matte", "--from", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2 and f"{tmp_path / 'nothing-here'}: no such file or folder" in missing.stderr
    assert not _placed(offline.store).exists()


def test_the_service_checks_every_byte_it_is_brought(offline: Offline, u2netp_file: Path) -> None:
    data = u2netp_file.read_bytes()
    route = prepare_pb2.SetupRequest()
    route.route.feature, route.route.recipe, route.route.engine = "image.matte", "u2netp", "onnxruntime"
    pin = prepare_pb2.BroughtFile(folder="u2netp", name="u2netp.onnx", size=len(data), sha256=U2NETP_SHA256)
    other = prepare_pb2.BroughtFile(folder="u2netp", name="u2netp.onnx", size=len(data), sha256="0" * 64)
    cases = {
        "bytes that are not the pin's": (pin, [data[:-1] + b"x"]),
        "more bytes than the pin's": (pin, [data, b"x"]),
        "a file not of the route": (other, [data]),
    }
    with AiClient(app_id="tests", target=offline.process.address) as ai:
        for what, (file, payloads) in cases.items():
            stream = [prepare_pb2.SetupUpload(route=route), prepare_pb2.SetupUpload(file=file)]
            for payload in payloads:
                stream += [prepare_pb2.SetupUpload(chunk=payload[i : i + MiB]) for i in range(0, len(payload), MiB)]
            with pytest.raises(CraftAiError) as raised:
                list(ai.transport.stream(SETUP_FROM, stream.__iter__, new_request_id()))
            assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT, what
            assert raised.value.reason == "FILE_MISMATCH", what
    assert not _placed(offline.store).exists()
    assert list((offline.store / "tmp" / "uploads").iterdir()) == []


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="placing files as another user needs root")


@root_only
def test_a_readable_file_of_another_owner_is_adopted(offline: Offline, u2netp_file: Path) -> None:
    placed = _placed(offline.store)
    placed.parent.mkdir(parents=True)
    shutil.copyfile(u2netp_file, placed)
    os.chown(placed, 12345, 12345)
    placed.chmod(0o600)
    run = offline.craftai("setup", "image.matte", "--recipe", "u2netp")  # offline: only the placed file
    assert run.returncode == 0, run.stderr
    assert f"note: adopted {placed}, placed by hand (owner uid 12345, mode 0600)" in run.stderr
    assert placed.stat().st_uid == os.geteuid()
    assert hashlib.sha256(placed.read_bytes()).hexdigest() == U2NETP_SHA256


@pytest.fixture
def service_home() -> Iterator[Path]:
    """A folder the service's user owns, outside pytest's (whose folders only root may enter)."""
    home = Path(tempfile.mkdtemp(prefix="craftai-service-"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@root_only
def test_a_file_the_service_cannot_read_is_refused_with_the_exact_fix(
    service_home: Path, u2netp_file: Path, offline_server: Offline
) -> None:
    """As under compose: the service runs as uid 10001, the file was copied in as root, mode 0600."""
    tmp_path = service_home
    for folder in ("config", "store"):
        (tmp_path / folder).mkdir(mode=0o700)
    shutil.copyfile(offline_server.recipes, tmp_path / "recipes.toml")
    for path in (tmp_path, tmp_path / "config", tmp_path / "store", tmp_path / "recipes.toml"):
        os.chown(path, SERVICE_UID, SERVICE_UID)
    env = {
        "CRAFTAI_STORE": str(tmp_path / "store"),
        "CRAFTAI_CONFIG_DIR": str(tmp_path / "config"),
        "CRAFTAI_RECIPES": str(tmp_path / "recipes.toml"),
    }
    as_service = ["setpriv", f"--reuid={SERVICE_UID}", f"--regid={SERVICE_UID}", "--clear-groups"]
    process = servers.start("craftai-serve", [*as_service, str(servers.BIN / "craftai"), "serve"], env, tmp_path)
    with servers.running(process):
        placed = _placed(tmp_path / "store")
        placed.parent.mkdir()
        shutil.copyfile(u2netp_file, placed)
        placed.chmod(0o600)  # root's, unreadable to the service
        client = {**os.environ, **env, "CRAFTAI_ADDRESS": process.address}
        command = [str(servers.BIN / "craftai"), "setup", "image.matte", "--recipe", "u2netp"]
        run = subprocess.run(command, env=client, capture_output=True, text=True, timeout=300, check=False)
        assert run.returncode == 1
        assert f"this service (uid {SERVICE_UID}, group {SERVICE_UID}) cannot read or write {placed}" in run.stderr
        assert "owner uid 0" in run.stderr and "mode 0600" in run.stderr and "internal error" not in run.stderr
        fix = re.search(r"Fix it as that file's owner or root: `([^`]+)`", run.stderr)
        assert (
            fix is not None and fix.group(1) == f"chown -R {SERVICE_UID}:{SERVICE_UID} {tmp_path / 'store' / 'models'}"
        )
        assert f"or bring the files with `{FROM_COMMAND}`" in run.stderr
        subprocess.run(shlex.split(fix.group(1)), check=True)  # the fix, as said
        again = subprocess.run(command, env=client, capture_output=True, text=True, timeout=300, check=False)
        assert again.returncode == 0, again.stderr
        assert "already set up (files checked)" in again.stdout
