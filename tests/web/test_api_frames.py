"""The frame stream over a WebSocket (/api/v1/frames) on the real gateway and services
(tests/web/conftest.py), driven by the `websockets` client as a program or a page drives it: each
frame's outputs are remove_background's bytes for the same frame and options, in the frames'
order; a bad first message, a bad frame, a missing key and a frame over the upload limit are
refused in plain words (or by the protocol, for the frame too large to read); a client that leaves
mid-stream ends its gRPC stream."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from craftai import AiClient
from craftai_dev import servers
from craftai_wire.vocabulary import GatewayReason, Reason
from tests.web.conftest import API_APP

MiB = 1 << 20
LEFT = "the client left; its stream was cancelled"  # the gateway's log line (craftai.web.routes.frames)
WAIT = 120.0  # a message's longest wait (the route's first load on a busy machine)


@pytest.fixture(scope="module")
def frames(photo: Path) -> list[bytes]:
    """Four JPEG frames of a camera panning over the photo."""
    picture = np.asarray(Image.open(photo).convert("RGB"))
    made = []
    for shift in range(0, 40, 10):
        buffer = io.BytesIO()
        Image.fromarray(np.roll(picture, shift, axis=1)).save(buffer, "JPEG", quality=90)
        made.append(buffer.getvalue())
    return made


def _socket(gateway: servers.Process, key: str | None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": API_APP} if key else {}
    address = gateway.address.replace("http://", "ws://") + "/api/v1/frames"
    return connect(address, additional_headers=headers, max_size=64 * MiB, open_timeout=30)


@pytest.fixture
def socket(gateway: servers.Process, key: str) -> Iterator[ClientConnection]:
    with _socket(gateway, key) as opened:
        yield opened


def _json(socket: ClientConnection) -> dict[str, Any]:
    message = socket.recv(timeout=WAIT)
    assert isinstance(message, str), f"a binary message of {len(message)} bytes where JSON was expected"
    answer: dict[str, Any] = json.loads(message)
    return answer


def _until(socket: ClientConnection, kind: str) -> dict[str, Any]:
    """The next message of `kind` (progress events of the route's load passed over)."""
    while True:
        message = _json(socket)
        if kind in message or "error" in message:
            return message


def _refusal(socket: ClientConnection) -> tuple[dict[str, Any], int, str]:
    """The error's JSON, then the close's code and reason."""
    error = _until(socket, "error")
    assert "error" in error, error
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=WAIT)
    assert closed.value.rcvd is not None
    return error["error"], closed.value.rcvd.code, closed.value.rcvd.reason


def _stream(socket: ClientConnection, options: dict[str, Any], frames: list[bytes]) -> list[dict[str, Any]]:
    """The options, the frames and the end sent; each frame's message with its outputs' bytes."""
    socket.send(json.dumps(options))
    started = _until(socket, "started")
    assert "started" in started, started
    assert started["started"]["recipe"] == "u2netp" and started["started"]["in_flight"] >= 1
    for frame in frames:
        socket.send(frame)
    socket.send(json.dumps({"end": True}))
    answers = []
    for _ in frames:
        frame_answer = _json(socket)["frame"]
        frame_answer["bytes"] = {}
        for output in frame_answer["outputs"]:
            data = socket.recv(timeout=WAIT)
            assert isinstance(data, bytes)
            frame_answer["bytes"][output["name"]] = data
        answers.append(frame_answer)
    done = _json(socket)
    assert done["done"]["frames"] == len(frames), done
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=WAIT)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    return answers


def test_each_frame_is_answered_in_order_as_remove_background_answers_it(
    socket: ClientConnection, frames: list[bytes], sdk: AiClient
) -> None:
    answers = _stream(socket, {"outputs": "cutout,matte", "recipe": "u2netp", "in_flight": 2}, frames)
    assert [a["index"] for a in answers] == list(range(len(frames)))
    for frame, got in zip(frames, answers, strict=True):
        expected = sdk.remove_background(frame, outputs="cutout,matte", recipe="u2netp")
        assert [o["name"] for o in got["outputs"]] == list(expected.images)
        assert {o["name"]: o["media_type"] for o in got["outputs"]} == {"cutout": "image/png", "matte": "image/png"}
        assert got["bytes"] == {name: image.data for name, image in expected.images.items()}
        assert (got["width"], got["height"]) == (expected.width, expected.height)
        assert got["recipe"] == "u2netp" and got["timing_ms"]


def test_a_page_sends_its_key_in_the_first_message(
    gateway: servers.Process, key: str, frames: list[bytes], sdk: AiClient
) -> None:
    """A browser cannot set a WebSocket's headers: the key and app id come with the options."""
    options = {"key": key, "app_id": API_APP, "outputs": ["composite"], "bg_color": "#2040c0", "format": "jpeg"}
    with _socket(gateway, None) as socket:
        (got,) = _stream(socket, {**options, "recipe": "u2netp"}, frames[:1])
    expected = sdk.remove_background(frames[0], outputs="composite", bg_color="#2040c0", format="jpeg", recipe="u2netp")
    assert got["outputs"][0]["media_type"] == "image/jpeg"
    assert got["bytes"] == {name: image.data for name, image in expected.images.items()} != {}


def test_a_stream_without_a_key_is_refused(gateway: servers.Process) -> None:
    with _socket(gateway, None) as socket:
        socket.send(json.dumps({"outputs": "cutout"}))
        error, code, reason = _refusal(socket)
    assert error["reason"] == Reason.MISSING_APP_KEY and "Authorization" in error["message"]
    assert (code, reason) == (4401, Reason.MISSING_APP_KEY)


@pytest.mark.parametrize(
    ("first", "reason", "words"),
    [
        ("not json", GatewayReason.BAD_REQUEST, "not valid JSON"),
        (b"\xff\xd8", GatewayReason.BAD_REQUEST, "text JSON object of options"),
        (json.dumps({"model": "u2netp"}), GatewayReason.UNKNOWN_PARAMETER, "recipe=u2netp"),
        (json.dumps({"outputs": "cutout,shadow"}), GatewayReason.BAD_REQUEST, "shadow"),
        (json.dumps({"in_flight": "many"}), GatewayReason.BAD_REQUEST, "in_flight is a number"),
    ],
)
def test_a_bad_first_message_is_refused_in_plain_words(
    socket: ClientConnection, first: str | bytes, reason: str, words: str
) -> None:
    socket.send(first)
    error, code, closed_with = _refusal(socket)
    assert error["reason"] == reason and words in error["message"], error
    assert (code, closed_with) == (4400, reason)


def test_a_bad_frame_ends_the_stream_after_the_frames_before_it(socket: ClientConnection, frames: list[bytes]) -> None:
    socket.send(json.dumps({"outputs": "matte", "recipe": "u2netp"}))
    assert "started" in _until(socket, "started")
    socket.send(frames[0])
    socket.send(b"not a picture")
    assert _json(socket)["frame"]["index"] == 0
    assert isinstance(socket.recv(timeout=WAIT), bytes)
    error, code, reason = _refusal(socket)
    assert error["reason"] == Reason.BAD_PICTURE and error["message"].startswith("frame 1: "), error
    assert (code, reason) == (4400, Reason.BAD_PICTURE)


def test_a_message_that_is_neither_a_frame_nor_the_end_is_refused(socket: ClientConnection) -> None:
    socket.send(json.dumps({"outputs": "matte", "recipe": "u2netp"}))
    assert "started" in _until(socket, "started")
    socket.send(json.dumps({"stop": True}))
    error, code, _ = _refusal(socket)
    assert error["reason"] == GatewayReason.BAD_REQUEST and '{"end": true}' in error["message"]
    assert code == 4400


def test_a_frame_over_the_upload_limit_is_refused_before_it_is_read_whole(socket: ClientConnection) -> None:
    """The protocol refuses a message over CRAFTAI_WEB_MAX_UPLOAD_BYTES (32 MiB here) as it comes."""
    socket.send(json.dumps({"outputs": "matte", "recipe": "u2netp"}))
    assert "started" in _until(socket, "started")
    with pytest.raises(ConnectionClosed) as closed:
        socket.send(bytes(32 * MiB + 1))
        socket.recv(timeout=WAIT)
    # The close frame, unless the connection was reset while the client still sent (the rest unread).
    assert closed.value.rcvd is None or closed.value.rcvd.code == 1009


def test_a_client_that_leaves_mid_stream_ends_its_grpc_stream(
    gateway: servers.Process, key: str, frames: list[bytes], sdk: AiClient
) -> None:
    left = gateway.logs().count(LEFT)
    with _socket(gateway, key) as socket:
        socket.send(json.dumps({"outputs": "matte", "recipe": "u2netp", "in_flight": 1}))
        assert "started" in _until(socket, "started")
        for frame in frames:
            socket.send(frame)
        assert _json(socket)["frame"]["index"] == 0
    deadline = time.monotonic() + 30
    while gateway.logs().count(LEFT) <= left:
        assert time.monotonic() < deadline, gateway.logs()[-2000:]
        time.sleep(0.1)
    with _socket(gateway, key) as socket:  # the app's next stream is served
        (got,) = _stream(socket, {"outputs": "matte", "recipe": "u2netp"}, frames[:1])
    expected = sdk.remove_background(frames[0], outputs="matte", recipe="u2netp")
    assert got["bytes"] == {name: image.data for name, image in expected.images.items()} != {}
