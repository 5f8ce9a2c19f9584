"""Commands and default clients that start the shared local server by themselves: one server for
two first commands at once, shown by `craftai status` and stopped by `craftai serve --stop`; an
idle stop; an address given on purpose never starting one; and what a client says when no
server answers or its TLS cannot be checked.

Each test moves the local address to a free port (CRAFTAI_PORT) and the config folder to one of
its own, so that the server it starts is its own and never the machine's 50051."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pty
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, AsyncAiClient, CraftAiError, FeatureInfo
from craftai.local_server import answering, shared
from craftai_dev import servers

STARTED = "started a craft-ai server for you at"
BOUND_SECONDS = 120.0  # a bound on what must happen, never a measure of how fast


@dataclass
class Home:
    """The environment of one user whose commands find no server: a config folder, a store and
    a local port of their own."""

    env: dict[str, str]
    root: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.env['CRAFTAI_PORT']}"

    def craftai(self, *args: str, **more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(servers.BIN / "craftai"), *args],
            env={**self.env, **more},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def _home(root: Path, local_catalogue: Path, **more: str) -> Home:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAFTAI_")}
    env.update(
        CRAFTAI_CONFIG_DIR=str(root / "config"),
        CRAFTAI_STORE=str(root / "store"),
        CRAFTAI_PORT=str(servers.free_port()),
        CRAFTAI_RECIPES=str(local_catalogue),
        **more,
    )
    return Home(env, root)


@pytest.fixture
def home(tmp_path: Path, local_catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A user's environment, also this process's (so that the SDK here is that user), and the
    shared server it may start stopped at the end whatever happened."""
    found = _home(tmp_path, local_catalogue)
    for name in [n for n in os.environ if n.startswith("CRAFTAI_")]:
        monkeypatch.delenv(name)
    for name, value in found.env.items():
        if name.startswith("CRAFTAI_"):
            monkeypatch.setenv(name, value)
    yield found
    found.craftai("serve", "--stop")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return state.rpartition(")")[2].split()[0] == "Z"


def test_two_first_commands_start_one_server_which_status_shows_and_stop_stops(home: Home) -> None:
    assert not answering(home.address)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: home.craftai("setup", "image.matte", "--recipe", "u2netp"), range(2)))
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    said = [line for r in runs for line in r.stderr.splitlines() if STARTED in line]
    assert len(said) == 1, said  # one server for both; the other command found it
    assert said[0].startswith(f"craftai: {STARTED} {home.address} (pid ")
    assert "stop it with: craftai serve --stop" in said[0]
    server = shared()
    assert server is not None and server.address == home.address
    log = [
        json.loads(line)
        for line in (home.root / "config" / "server" / "log").read_text().splitlines()
        if line[:1] == "{"
    ]
    assert sum(line["message"].startswith("started by craftai setup") for line in log) == 1

    status = home.craftai("status", "image.matte")
    assert status.returncode == 0, status.stderr
    assert f"server: {home.address}, the shared server a command started (pid {server.pid}" in status.stdout
    assert "u2netp" in status.stdout and STARTED not in status.stderr

    stop = home.craftai("serve", "--stop")
    assert stop.returncode == 0 and f"stopped the shared craft-ai server at {home.address} (pid {server.pid})" in (
        stop.stdout
    )
    assert _gone(server.pid) and not answering(home.address) and shared() is None
    again = home.craftai("serve", "--stop")
    assert "no shared craft-ai server is running" in again.stdout

    looked = home.craftai("status")  # looking starts nothing
    assert looked.returncode == 1 and not answering(home.address)
    assert f"no craft-ai server at {home.address}: start one with `craftai serve` (or set CRAFTAI_ADDRESS)" in (
        looked.stderr
    )


def test_the_asyncio_client_starts_the_server_which_stops_itself_when_idle(
    home: Home, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CRAFTAI_SHARED_IDLE_MINUTES", "0.05")  # 3 s: the setting scaled down

    async def features() -> list[FeatureInfo]:  # the asyncio client (the command tests the blocking one)
        async with AsyncAiClient(app_id="tests") as ai:
            return await ai.features()

    with caplog.at_level(logging.WARNING, logger="craftai.local_server"):
        found = asyncio.run(features())
    assert {f.name for f in found} == {"image.matte", "image.segment"}
    assert [r.message for r in caplog.records if STARTED in r.message] != []
    server = shared()
    assert server is not None and server.idle_minutes == 0.05
    deadline = time.monotonic() + BOUND_SECONDS
    while not _gone(server.pid):
        assert time.monotonic() < deadline, "the idle server did not stop"
        time.sleep(0.2)
    assert not answering(home.address)
    assert "no call for 0.05 minute(s): stopping" in (home.root / "config" / "server" / "log").read_text()


def test_an_address_given_never_starts_a_server(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    for given in (("--address", home.address), ()):
        more = {} if given else {"CRAFTAI_ADDRESS": home.address}
        run = home.craftai(*given, "setup", "image.matte", **more)
        assert run.returncode == 1
        assert f"no craft-ai server at {home.address}: start one with `craftai serve` (or set CRAFTAI_ADDRESS)" in (
            run.stderr
        )
    off = home.craftai("setup", "image.matte", CRAFTAI_AUTOSTART="off")  # the opt-out
    assert off.returncode == 1 and "no craft-ai server at" in off.stderr
    with AiClient(app_id="tests", target=home.address) as ai, pytest.raises(CraftAiError) as raised:
        ai.features()
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE and "no craft-ai server at" in raised.value.message
    with AiClient(app_id="tests", start_server=False) as ai, pytest.raises(CraftAiError):
        ai.features()
    monkeypatch.setenv("CRAFTAI_ADDRESS", home.address)
    with AiClient(app_id="tests") as ai, pytest.raises(CraftAiError):
        ai.features()
    assert not answering(home.address) and shared() is None
    assert not (home.root / "config" / "server" / "state.json").exists()


def test_a_client_of_another_config_folder_is_told_which_certificate_it_looked_for(
    tmp_path: Path, local_catalogue: Path
) -> None:
    owner = _home(tmp_path / "owner", local_catalogue)
    process = servers.embedded(tmp_path / "store", tmp_path, {**owner.env, "CRAFTAI_PORT": "0"})
    with servers.running(process):
        stranger = _home(tmp_path / "stranger", local_catalogue, CRAFTAI_ADDRESS=process.address)
        run = stranger.craftai("status")  # no certificate in its folder: plain text against TLS
        assert run.returncode == 1
        looked = tmp_path / "stranger" / "config" / "local-tls.crt"
        assert f"the server at {process.address} speaks TLS" in run.stderr
        assert f"it looked for the local server's certificate at {looked}, which is not there" in run.stderr

        other = servers.embedded(tmp_path / "store2", tmp_path / "other", {**stranger.env, "CRAFTAI_PORT": "0"})
        other.stop()  # the stranger's folder now has a certificate of its own server, not this one's
        pinned = stranger.craftai("status")
        assert pinned.returncode == 1
        assert f"the server at {process.address} did not prove to be the local server" in pinned.stderr
        assert f"this client pins the certificate {looked}" in pinned.stderr


def test_craftai_serve_writes_text_logs_on_a_terminal(home: Home) -> None:
    """For people on a terminal; JSON lines elsewhere (the shared server's log above is JSON)."""
    leader, follower = pty.openpty()
    ready = home.root / "ready"
    env = {**home.env, "CRAFTAI_READY_FILE": str(ready)}
    process = subprocess.Popen(
        [str(servers.BIN / "craftai"), "serve"], env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
    )
    os.close(follower)
    chunks: list[bytes] = []

    def read() -> None:
        with contextlib.suppress(OSError):  # EIO once the terminal's last writer is gone
            while data := os.read(leader, 4096):
                chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + BOUND_SECONDS
        while not ready.exists():
            assert process.poll() is None and time.monotonic() < deadline, b"".join(chunks).decode(errors="replace")
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(BOUND_SECONDS)
        reader.join(BOUND_SECONDS)
        os.close(leader)
    lines = [line for line in b"".join(chunks).decode(errors="replace").splitlines() if line.strip()]
    assert any("serving" in line for line in lines), lines
    assert not any(line.lstrip().startswith("{") for line in lines), lines
