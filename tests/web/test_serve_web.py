"""`craftai serve --web`: the page served, the local key kept out of the log (the link in a file
only its user can read), the gateway in a process of its own (a flood of connections to it leaves
the gRPC services answering, within a descriptor limit of 256 for the whole command), and SIGTERM
done within the gateway's grace while a client is still sending a body."""

from __future__ import annotations

import json
import select
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

from craftai import AiClient
from craftai.web.server import RESERVED_DESCRIPTORS
from craftai_dev import servers, web
from craftai_wire.keys import config_dir

DESCRIPTORS = 256  # the command's descriptor limit (soft and hard), the gateway's connections fewer
FLOOD = 300
SLOW = {  # bounds far beyond the test's: only the grace may end the slow client's call
    "CRAFTAI_WEB_HEADER_TIMEOUT_SECONDS": "600",
    "CRAFTAI_WEB_BODY_TIMEOUT_SECONDS": "600",
    "CRAFTAI_WEB_GRACE_SECONDS": "1",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, local_catalogue: Path) -> Iterator[tuple[servers.Process, str]]:
    """The command and its gateway's URL; the last test stops it."""
    root = tmp_path_factory.mktemp("serve-web")
    ready = root / "web.address"
    env = {
        "CRAFTAI_STORE": str(root / "store"),
        "CRAFTAI_RECIPES": str(local_catalogue),
        "CRAFTAI_WEB_PORT": "0",
        "CRAFTAI_WEB_READY_FILE": str(ready),
        **SLOW,
    }
    limited = f'ulimit -n {DESCRIPTORS} && exec "$0" serve --web'
    process = servers.start("craftai-serve-web", ["sh", "-c", limited, str(servers.BIN / "craftai")], env, root)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield process, ready.read_text()
    finally:
        process.kill()


def test_the_page_is_served_and_the_key_stays_off_the_log(served: tuple[servers.Process, str], key: str) -> None:
    process, url = served
    link = config_dir() / "web.link"
    assert f"craftai web: the page and the HTTP API on {url}/ (the link with the local key: {link}" in process.logs()
    assert key not in process.logs() and quote(key) not in process.logs()
    assert link.read_text().strip() == f"{url}/#key={quote(key)}"
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and "Remove background" in page.text
    status = httpx.get(f"{url}/api/v1/status", headers={"Authorization": f"Bearer {key}"})
    assert status.status_code == 200 and status.json()["runtime"]["device"] == "cpu"


def test_a_flood_of_connections_to_the_gateway_leaves_grpc_answering(served: tuple[servers.Process, str]) -> None:
    """More connections than the command's descriptors: the gateway refuses those beyond its bound
    (503) and the services, in their own process, accept a new client and answer it."""
    process, url = served
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    flood = []
    try:
        for _ in range(FLOOD):
            flood.append(socket.create_connection((parts.hostname, parts.port), timeout=30))
        with AiClient(app_id="tests", target=process.address) as ai:
            assert ai.runtime().device == "cpu"
        kept = DESCRIPTORS - RESERVED_DESCRIPTORS
        waiting, refused = list(flood), 0
        deadline = time.monotonic() + 30
        while refused < FLOOD - kept and time.monotonic() < deadline:
            for sock in select.select(waiting, [], [], 1.0)[0]:
                waiting.remove(sock)
                head, _, body = web.http_answer(sock).partition(b"\r\n\r\n")
                assert (
                    head.startswith(b"HTTP/1.1 503") and json.loads(body)["error"]["reason"] == "TOO_MANY_CONNECTIONS"
                )
                refused += 1
        assert refused >= FLOOD - kept
        assert "out of system resource" not in process.logs() and "out of descriptors" not in process.logs()
    finally:
        for sock in flood:
            sock.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the flood's connections closing
        if httpx.get(f"{url}/healthz", timeout=30).status_code == 200:
            break
        time.sleep(0.1)
    assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200


def test_sigterm_ends_within_the_grace_despite_a_slow_body(served: tuple[servers.Process, str], key: str) -> None:
    """A client sends the head and some of a body, then nothing: the gateway's grace (1 s) ends its
    call with 503 SHUTTING_DOWN, and the command exits 0, long before the 600 s the client has."""
    process, url = served
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as slow:
        head = (
            f"POST /api/v1/remove-background HTTP/1.1\r\nHost: {parts.hostname}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: image/png\r\nContent-Length: 1000000\r\n\r\n"
        )
        slow.sendall(head.encode() + b"\0" * 1000)
        status = httpx.get(f"{url}/api/v1/status", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert status.status_code == 200  # the key's verdict is in: the slow call reads its body
        process.popen.send_signal(15)
        assert process.popen.wait(60) == 0
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
    head_part, _, body = answer.partition(b"\r\n\r\n")
    assert head_part.startswith(b"HTTP/1.1 503"), answer[:300]
    assert json.loads(body)["error"]["reason"] == "SHUTTING_DOWN"
    assert "Traceback" not in process.logs()
