"""The gateway protects the services: a `craftai web` process with scaled bounds (a second's
timeouts, 8 connections, 1 MiB uploads, 2 MiB of bodies held, 4 KiB heads) in front of the web
suite's services, tried with raw sockets as a slow or hostile client would. Each bound is met and
answered with its status and reason; the key is checked before any body is read; a JSON call whose
client leaves is cancelled (the services stop the work); a client that leaves mid-upload is logged
once at INFO; a Host the gateway is not known by is refused; a frame stream whose options never
come, or whose services are not there, is closed with 4408 or 4503."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from craftai import AiClient
from craftai_dev import servers, web

APP = "protection-tests"  # this module's own app id (one kept picture per app in the web suite)
ALLOWED_NAME = "craftai.test"
SCALED = {
    "CRAFTAI_WEB_HEADER_TIMEOUT_SECONDS": "1",
    "CRAFTAI_WEB_KEEP_ALIVE_SECONDS": "1",
    "CRAFTAI_WEB_BODY_TIMEOUT_SECONDS": "1",
    "CRAFTAI_WEB_BODY_MIN_RATE": "1000",
    "CRAFTAI_WEB_MAX_CONNECTIONS": "8",
    "CRAFTAI_WEB_MAX_UPLOAD_BYTES": str(1 << 20),
    "CRAFTAI_WEB_MAX_BODY_BYTES": str(2 << 20),
    "CRAFTAI_WEB_MAX_HEADER_BYTES": "4096",
    "CRAFTAI_WEB_ALLOWED_HOSTS": ALLOWED_NAME,
}
WAIT = 30.0  # far beyond every scaled bound: a socket still silent then is a bound not kept


@pytest.fixture(scope="module")
def guarded(services: servers.Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    with servers.running(web.gateway(services.address, tmp_path_factory.mktemp("guarded"), SCALED)) as process:
        yield process


def _where(process: servers.Process) -> tuple[str, int]:
    parts = urlsplit(process.address)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


def _connect(process: servers.Process) -> socket.socket:
    sock = socket.create_connection(_where(process), timeout=WAIT)
    return sock


def _head(method: str, path: str, host: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection (or WAIT passes: a test fails)."""
    sock.settimeout(WAIT)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk


def _status_and_error(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["status"] == status and error["message"], answer[:300]
    return status, error


def test_a_connection_that_sends_nothing_is_closed(guarded: servers.Process) -> None:
    with _connect(guarded) as sock:
        assert _answer(sock) == b""  # closed by the gateway (nothing of a request came: no answer)


def test_slow_headers_are_answered_408_and_closed(guarded: servers.Process) -> None:
    host, _ = _where(guarded)
    with _connect(guarded) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n".encode())
        try:
            for n in range(int(WAIT / 0.25)):  # one header every 0.25 s, never the end of the head
                sock.sendall(f"X-Slow-{n}: a\r\n".encode())
                if select.select([sock], [], [], 0.25)[0]:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, error = _status_and_error(_answer(sock))
    assert status == 408 and error["reason"] == "REQUEST_TIMEOUT"
    assert "CRAFTAI_WEB_HEADER_TIMEOUT_SECONDS" in error["message"]


def test_a_kept_connection_idle_or_slow_is_closed(guarded: servers.Process) -> None:
    """After an answer, a connection kept alive is closed when idle, and a next request whose head
    comes a byte at a time is cut as the first would be."""
    host, _ = _where(guarded)
    with _connect(guarded) as sock:
        sock.sendall(_head("GET", "/healthz", host))
        assert _answer(sock).startswith(b"HTTP/1.1 200")  # then, idle past the keep-alive: closed
    with _connect(guarded) as sock:
        sock.sendall(_head("GET", "/healthz", host))
        first = b""
        while not first.endswith(b'{"ok":true}'):
            first += sock.recv(65536)
        try:
            for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 400:
                sock.sendall(bytes([byte]))
                if select.select([sock], [], [], 0.1)[0]:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = _answer(sock)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]


def _post_head(host: str, path: str, length: int, key: str | None, *more: str) -> bytes:
    auth = [f"Authorization: Bearer {key}"] if key else []
    return _head("POST", path, host, *auth, f"Craftai-App-Id: {APP}", f"Content-Length: {length}", *more)


def test_a_slow_body_is_answered_408_and_closed(guarded: servers.Process, key: str) -> None:
    host, _ = _where(guarded)
    with _connect(guarded) as sock:
        sock.sendall(_post_head(host, "/api/v1/remove-background", 100_000, key, "Content-Type: image/png"))
        sock.sendall(b"\0" * 500)
        try:
            for _ in range(int(WAIT / 0.25)):  # 40 bytes a second: far under the 1,000 required
                sock.sendall(b"\0" * 10)
                if select.select([sock], [], [], 0.25)[0]:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = _answer(sock)  # and closed
    status, error = _status_and_error(answer)
    assert status == 408 and error["reason"] == "REQUEST_TIMEOUT" and b"connection: close" in answer.lower()


@pytest.mark.parametrize(
    ("key", "status", "reason"), [(None, 401, "MISSING_APP_KEY"), ("craftai_wrong", 403, "BAD_APP_KEY")]
)
def test_the_key_is_checked_before_the_body(
    guarded: servers.Process, key: str | None, status: int, reason: str
) -> None:
    """A request without a good key is answered on its headers: not one byte of its body is sent."""
    host, _ = _where(guarded)
    with _connect(guarded) as sock:
        sock.sendall(_post_head(host, "/api/v1/remove-background", 900_000, key, "Content-Type: image/png"))
        answer = _answer(sock)
    assert _status_and_error(answer)[0] == status and _status_and_error(answer)[1]["reason"] == reason
    assert b"connection: close" in answer.lower()  # the unread body is never read


def test_connections_beyond_the_bound_are_refused(guarded: servers.Process) -> None:
    opened = [_connect(guarded) for _ in range(14)]
    try:
        answers = [_answer(sock) for sock in opened]
    finally:
        for sock in opened:
            sock.close()
    refused = [a for a in answers if a]
    assert all(_status_and_error(a)[0] == 503 for a in refused)
    assert all(_status_and_error(a)[1]["reason"] == "TOO_MANY_CONNECTIONS" for a in refused)
    assert len(refused) >= 14 - 8 and answers.count(b"") <= 8  # the idle ones the gateway kept, then closed
    assert httpx.get(f"{guarded.address}/healthz").status_code == 200


def test_the_bodies_held_at_once_are_bounded(guarded: servers.Process, key: str) -> None:
    """2 MiB of bodies at most: two 1 MiB uploads in progress, a third request with a body is
    refused on its headers; once their clients have left, a body is taken again."""
    host, _ = _where(guarded)
    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": APP}
    assert httpx.get(f"{guarded.address}/api/v1/status", headers=headers, timeout=WAIT).status_code == 200
    uploads = [_connect(guarded) for _ in range(2)]
    try:
        for sock in uploads:
            sock.sendall(_post_head(host, "/api/v1/remove-background", 1 << 20, key, "Content-Type: image/png"))
            sock.sendall(b"\0" * 10_000)  # 11 s of allowance at 1,000 bytes a second
        # A round trip on the gateway's loop after both heads: their calls have begun by then.
        assert httpx.get(f"{guarded.address}/healthz", timeout=WAIT).status_code == 200
        third = httpx.post(
            f"{guarded.address}/api/v1/sessions/no-such/segment",
            json={"points": [[1, 1]]},
            headers=headers,
            timeout=WAIT,
        )
        assert third.status_code == 503 and third.json()["error"]["reason"] == "TOO_MANY_UPLOADS"
        assert int(third.headers["retry-after"]) >= 1
    finally:
        for sock in uploads:
            sock.close()  # their clients leave: their calls end and free their bytes
    deadline = time.monotonic() + WAIT
    while True:
        after = httpx.post(
            f"{guarded.address}/api/v1/sessions/no-such/segment",
            json={"points": [[1, 1]]},
            headers=headers,
            timeout=WAIT,
        )
        if after.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after.status_code == 404 and after.json()["error"]["reason"] == "SESSION_NOT_FOUND"


def test_oversized_headers_are_431_with_a_reason(guarded: servers.Process, key: str) -> None:
    host, _ = _where(guarded)
    whole = _head("GET", "/healthz", host, "X-Big: " + "a" * 6000)
    with _connect(guarded) as sock:
        sock.sendall(whole)  # the whole head at once
        status, error = _status_and_error(_answer(sock))
    assert (
        status == 431 and error["reason"] == "HEADERS_TOO_LARGE" and "CRAFTAI_WEB_MAX_HEADER_BYTES" in error["message"]
    )
    with _connect(guarded) as sock:
        sock.sendall(whole[:5000])  # a head still incomplete past the bound
        status, error = _status_and_error(_answer(sock))
    assert status == 431 and error["reason"] == "HEADERS_TOO_LARGE"
    long_key = httpx.get(f"{guarded.address}/api/v1/status", headers={"Authorization": "Bearer " + "k" * 1000})
    assert long_key.status_code == 431 and long_key.json()["error"]["reason"] == "HEADERS_TOO_LARGE"
    assert "at most 256" in long_key.json()["error"]["message"]


def test_only_the_gateways_own_names_are_answered(guarded: servers.Process, key: str) -> None:
    """DNS rebinding: a page of evil.example whose name was made to resolve to the gateway."""
    _, port = _where(guarded)
    rebound = httpx.get(f"{guarded.address}/", headers={"Host": f"evil.example:{port}"})
    assert rebound.status_code == 400 and rebound.json()["error"]["reason"] == "HOST_NOT_ALLOWED"
    api = httpx.get(
        f"{guarded.address}/api/v1/status", headers={"Host": "evil.example", "Authorization": f"Bearer {key}"}
    )
    assert api.status_code == 400 and api.json()["error"]["reason"] == "HOST_NOT_ALLOWED"
    for name in (f"localhost:{port}", f"127.0.0.1:{port}", ALLOWED_NAME):
        assert httpx.get(f"{guarded.address}/", headers={"Host": name}).status_code == 200, name
    assert httpx.get(f"{guarded.address}/healthz", headers={"Host": "evil.example"}).status_code == 200  # probes


def test_a_client_that_leaves_mid_upload_is_logged_once_at_info(guarded: servers.Process, key: str) -> None:
    host, _ = _where(guarded)
    path = "/api/v1/sessions"
    with _connect(guarded) as sock:
        sock.sendall(_post_head(host, path, 500_000, key, "Content-Type: image/png"))
        sock.sendall(b"\0" * 5000)
        assert httpx.get(f"{guarded.address}/healthz", timeout=WAIT).status_code == 200  # the upload has begun
    deadline = time.monotonic() + WAIT
    while f"POST {path}: the client left" not in guarded.logs() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [line for line in guarded.logs().splitlines() if "/api/v1/sessions" in line or "Traceback" in line]
    assert len([line for line in lines if "left during its upload" in line]) == 1, lines
    (line,) = lines
    assert " INFO " in line and "of 500,000 bytes" in line
    assert "Traceback" not in guarded.logs() and " ERROR " not in guarded.logs()


def _model_requests(sdk: AiClient) -> int:
    return sum(route.requests for route in sdk.runtime().loaded)


def test_a_json_call_whose_client_leaves_is_cancelled(
    guarded: servers.Process, sdk: AiClient, key: str, photo: Path
) -> None:
    """Segment everything as JSON (no progress to send): a grid of 1,600 points, 4 per decoder call
    (minutes on this CPU). Its client leaves once the work has begun: the services submit no
    further batch (their model request count stops), as they do when an event stream's client
    leaves."""
    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": APP}
    opened = httpx.post(f"{guarded.address}/api/v1/sessions", content=photo.read_bytes(), headers=headers, timeout=120)
    assert opened.status_code == 201, opened.text
    session = opened.json()["session_id"]
    host, _ = _where(guarded)
    body = json.dumps({"points_per_side": 40, "points_per_batch": 4}).encode()
    try:
        before = _model_requests(sdk)
        with _connect(guarded) as sock:
            sock.sendall(
                _post_head(
                    host, f"/api/v1/sessions/{session}/everything", len(body), key, "Content-Type: application/json"
                )
                + body
            )
            deadline = time.monotonic() + 120
            while _model_requests(sdk) < before + 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _model_requests(sdk) >= before + 2  # the grid is being decoded
        # The batch on the worker when the client left finishes; nothing after it. "Settled": no new
        # request for 3 s (several batches' time on a loaded 2-core machine).
        settled, quiet_since = _model_requests(sdk), time.monotonic()
        deadline = quiet_since + 60
        while time.monotonic() - quiet_since < 3.0 and time.monotonic() < deadline:
            time.sleep(0.5)
            now = _model_requests(sdk)
            if now != settled:
                settled, quiet_since = now, time.monotonic()
        assert settled - before < 20, (before, settled)  # of the 400 batches the whole grid needs
        deadline = time.monotonic() + WAIT
        while "left before its answer" not in guarded.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "everything: the client left before its answer; its call was cancelled" in guarded.logs()
    finally:
        httpx.delete(f"{guarded.address}/api/v1/sessions/{session}", headers=headers)


def _frames_socket(process: servers.Process, key: str) -> ClientConnection:
    address = process.address.replace("http://", "ws://") + "/api/v1/frames"
    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": APP}
    return connect(address, additional_headers=headers, open_timeout=WAIT)


def _closed_with(sock: ClientConnection) -> tuple[dict[str, Any], int, str]:
    """The error's JSON, then the close's code and reason."""
    message = sock.recv(timeout=WAIT)
    assert isinstance(message, str), message[:100]
    error: dict[str, Any] = json.loads(message)["error"]
    with pytest.raises(ConnectionClosed) as closed:
        sock.recv(timeout=WAIT)
    assert closed.value.rcvd is not None
    return error, closed.value.rcvd.code, closed.value.rcvd.reason


def test_a_frame_stream_whose_options_never_come_is_closed_4408(guarded: servers.Process, key: str) -> None:
    with _frames_socket(guarded, key) as sock:
        error, code, reason = _closed_with(sock)  # nothing sent: the body timeout (a second) passes
    assert (code, reason, error["status"], error["reason"]) == (4408, "REQUEST_TIMEOUT", 408, "REQUEST_TIMEOUT")
    assert "CRAFTAI_WEB_BODY_TIMEOUT_SECONDS" in error["message"]


def test_a_frame_stream_with_no_services_behind_is_closed_4503(
    tmp_path: Path, key: str, photos: dict[str, Path]
) -> None:
    """The gateway's services are not there: the stream's first frame is answered 503 in words and
    the socket closed with 4503, as the HTTP API answers 503."""
    nowhere = f"127.0.0.1:{servers.free_port()}"
    with servers.running(web.gateway(nowhere, tmp_path)) as gateway, _frames_socket(gateway, key) as sock:
        sock.send(json.dumps({"outputs": "matte"}))
        sock.send(photos["chelsea.png"].read_bytes())
        error, code, _reason = _closed_with(sock)
    assert (code, error["status"]) == (4503, 503), error
    assert nowhere in error["message"], error
