"""WebSocket /api/v1/frames: a camera's (or a video's) frames through InferService.MatteFrames, for
a browser (docs/WEB.md, "The frame stream").

The first message is text JSON: remove-background's options (`matte_query`'s names, read by
`matte_arguments`, as the HTTP endpoint reads them), the stream's own (`in_flight`, ...) and, for a
browser, which cannot set a WebSocket's headers, the app's `key` and `app_id`. Then each binary
message is one encoded frame, and text `{"end": true}` ends the stream. The gateway answers
`{"started"}` once the route is loaded, per frame a text message (index, timing, each output's
media type) and one binary message per output (the encoded bytes as the services made them: no
base64 to make and undo on each side), then `{"done"}`; an error is `{"error"}` and a close with
4000 + its HTTP status.

Bounded as an upload is: a message over CRAFTAI_WEB_MAX_UPLOAD_BYTES is refused by the protocol
before it is read whole (uvicorn's `ws_max_size`: close 1009); the socket reads no frame while
QUEUED frames wait and the SDK's window is full (no more than the services work on, and two); the
bytes of the frames not yet answered are counted in the bodies' budget
(CRAFTAI_WEB_MAX_BODY_BYTES); a client that leaves cancels the gRPC stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

import grpc
from fastapi import APIRouter, WebSocket
from starlette.datastructures import Headers
from starlette.websockets import WebSocketDisconnect

from craftai.calls import MATTE_FRAMES
from craftai.client import AsyncAiClient
from craftai.errors import CraftAiError
from craftai.frames import (
    AsyncWindow,
    FrameOutput,
    FramesDone,
    FramesStarted,
    Reading,
    requests_off_the_loop,
    starting,
)
from craftai.transport import new_request_id
from craftai.web.answers import answered, event
from craftai.web.callers import credentials
from craftai.web.errors import bad_request, error_body, gateway_error, http_status
from craftai.web.hosts import HostCheck
from craftai.web.parameters import unknown
from craftai.web.routes import API
from craftai.web.routes.matte import matte_arguments, matte_query
from craftai.web.settings import WebSettings
from craftai.web.uploads import BodyRules, Upload
from craftai_wire.v1.common_pb2 import Progress
from craftai_wire.vocabulary import GatewayReason, Reason

router = APIRouter(prefix=API)
log = logging.getLogger("craftai.web")
QUEUED = 2  # frames read from the socket ahead of the SDK's window; then the socket is not read
MATTE_OPTIONS = tuple(inspect.signature(matte_query).parameters)
# The stream's own options: starting()'s that remove-background's query has not (a picture's are not sent).
STREAM_OPTIONS = tuple(
    name for name in inspect.signature(starting).parameters if name not in {*MATTE_OPTIONS, "cutout", "bg_image"}
)
CREDENTIALS = ("key", "app_id")
SENT_HEADERS = ("authorization", "craftai-app-key", "craftai-app-id")
NORMAL_CLOSE = 1000


class ClientLeftError(Exception):
    """The client closed the socket (or its connection was lost)."""


class Held:
    """The bytes of this socket's frames not yet answered, reserved from the gateway's budget of
    bodies held at once (an upload's rule), each freed when its frame's answer is sent."""

    def __init__(self, rules: BodyRules) -> None:
        self.rules = rules
        self.sizes: deque[int] = deque()

    def take(self, size: int) -> None:
        if self.rules.held + size > self.rules.max_body_bytes:
            raise gateway_error(
                GatewayReason.TOO_MANY_UPLOADS,
                f"the gateway holds {self.rules.held:,} bytes of uploads and frames already, and "
                f"{self.rules.max_body_bytes:,} at most (CRAFTAI_WEB_MAX_BODY_BYTES): try again in a moment",
            )
        self.rules.held += size
        self.sizes.append(size)

    def answered(self) -> None:
        if self.sizes:
            self.rules.held -= self.sizes.popleft()

    def release(self) -> None:
        self.rules.held -= sum(self.sizes)
        self.sizes.clear()


@router.websocket("/frames")
async def frames(socket: WebSocket) -> None:
    """Remove the background of a stream of frames (docs/WEB.md, "The frame stream")."""
    settings: WebSettings = socket.app.state.settings
    host = socket.headers.get("host")
    if not HostCheck(_nothing, settings.host, settings.allowed_hosts, frozenset()).allows(host):
        await socket.close(1008, GatewayReason.HOST_NOT_ALLOWED)  # before the handshake: answered 403
        return
    await socket.accept()
    held = Held(getattr(socket.app.state, "body_rules", None) or _rules(settings))
    try:
        async with asyncio.timeout(settings.body_timeout_seconds):
            first = await _receive(socket)
        ai, options = await _opening(socket, first, settings)
        await _stream(socket, ai, options, held, settings.max_upload_bytes)
    except ClientLeftError:
        log.info("WebSocket %s: the client left; its stream was cancelled", socket.url.path)
    except TimeoutError:
        slow = gateway_error(
            GatewayReason.REQUEST_TIMEOUT,
            f"the first message (the options) did not come within {settings.body_timeout_seconds:g} s "
            "(CRAFTAI_WEB_BODY_TIMEOUT_SECONDS)",
        )
        await _refuse(socket, slow)
    except CraftAiError as exc:
        await _refuse(socket, exc)
    except ValueError as exc:  # the SDK's own checks of the options, in its words
        await _refuse(socket, bad_request(str(exc)))
    except Exception as exc:
        log.exception("the gateway failed on WebSocket %s", socket.url.path)
        failed = f"internal error in the gateway ({type(exc).__name__})"
        await _refuse(socket, CraftAiError(grpc.StatusCode.INTERNAL, failed, Reason.INTERNAL))
    else:
        with contextlib.suppress(Exception):
            await socket.close(NORMAL_CLOSE)
    finally:
        held.release()


async def _nothing(scope: Any, receive: Any, send: Any) -> None:
    """The Host check's inner app: never called (only its rule is used here)."""


def _rules(settings: WebSettings) -> BodyRules:
    """The bodies' rules of a router mounted without build() (which shares the gateway's)."""
    return BodyRules(
        settings.max_upload_bytes, settings.max_body_bytes, settings.body_timeout_seconds, settings.body_min_rate
    )


async def _receive(socket: WebSocket) -> str | bytes:
    """The next message's text or bytes; ClientLeftError once the client is gone."""
    message = await socket.receive()
    if message["type"] == "websocket.disconnect":
        raise ClientLeftError
    text: str | None = message.get("text")
    return text if text is not None else message.get("bytes") or b""


async def _refuse(socket: WebSocket, error: CraftAiError) -> None:
    """The error's JSON (as the HTTP API's), then the close: 4000 + its HTTP status, its reason."""
    status = http_status(error)
    with contextlib.suppress(Exception):  # the client may be gone already
        await socket.send_text(json.dumps(error_body(error, status)))
        await socket.close(4000 + status, (error.reason or error.code.name)[:120])


async def _opening(
    socket: WebSocket, first: str | bytes, settings: WebSettings
) -> tuple[AsyncAiClient, dict[str, Any]]:
    """The caller's app (its key: the handshake's headers, else the message's) and the stream's
    options (remove_background_frames' keyword arguments) from the first message."""
    try:
        given = json.loads(first) if isinstance(first, str) else None
    except json.JSONDecodeError as exc:
        raise bad_request(f"the first message is not valid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(given, dict):
        raise bad_request(
            'the first message is a text JSON object of options (e.g. {"outputs": "cutout"}); the frames come after it'
        )
    refusal = unknown(given, {*MATTE_OPTIONS, *STREAM_OPTIONS, *CREDENTIALS}, "option")
    if refusal is not None:
        raise refusal
    sent = {"craftai-app-key": given.get("key"), "craftai-app-id": given.get("app_id")}
    if not all(isinstance(v, str | None) for v in sent.values()):
        raise bad_request("key and app_id are strings")
    headers = {name: value for name, value in socket.headers.items() if name in SENT_HEADERS}
    headers |= {name: value for name, value in sent.items() if value}
    app_id, key = credentials(Headers(headers), settings.app_id)
    verifier = getattr(socket.app.state, "verifier", None)
    if verifier is not None:
        await verifier.check(app_id, key)  # as the HTTP API's KeyCheck: no frame is read without a good key
    root: AsyncAiClient = socket.app.state.root
    matte = {name: given.get(name) for name in MATTE_OPTIONS} | {"naive": given.get("naive", False)}
    if isinstance(matte["outputs"], list):
        matte["outputs"] = ",".join(str(name) for name in matte["outputs"])
    options = matte_arguments(matte, Upload(b""))
    for name in STREAM_OPTIONS:
        value = given.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise bad_request(f"{name} is a number; got {value!r}", field=name)
        options[name] = value
    return root.for_app(app_id, key), options


async def _stream(socket: WebSocket, ai: AsyncAiClient, options: dict[str, Any], held: Held, limit: int) -> None:
    """The frames read (a task of their own) while the answers are sent; whichever ends first ends
    the other: the client leaving or sending what is not a frame cancels the gRPC stream."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUED)
    reader = asyncio.ensure_future(_read(socket, queue, held, limit))
    writer = asyncio.ensure_future(_answer(socket, ai, options, queue, held))
    try:
        await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reader, writer):
            task.cancel()
        await asyncio.wait({reader, writer})
    if writer.done() and not writer.cancelled() and writer.exception() is None:
        return  # done: the client's close (or anything it sends now) is not waited for
    ended = reader if reader.done() and not reader.cancelled() else writer
    error = ended.exception()
    if isinstance(error, WebSocketDisconnect):
        raise ClientLeftError from error
    if error is not None:
        raise error


async def _read(socket: WebSocket, queue: asyncio.Queue[bytes | None], held: Held, limit: int) -> None:
    """Frames into the queue (waiting while it is full: the socket is not read meanwhile), until
    `{"end": true}`; after it, only the client's leaving is awaited."""
    while True:
        message = await _receive(socket)
        if isinstance(message, bytes):
            if len(message) > limit:
                raise gateway_error(
                    GatewayReason.UPLOAD_TOO_LARGE,
                    f"a frame of {len(message):,} bytes is larger than the gateway's limit of {limit:,} bytes "
                    "(CRAFTAI_WEB_MAX_UPLOAD_BYTES)",
                )
            held.take(len(message))
            await queue.put(message)
            continue
        try:
            ended = json.loads(message) == {"end": True}
        except json.JSONDecodeError:
            ended = False
        if not ended:
            raise bad_request('after the options, a message is a frame (binary) or {"end": true}')
        await queue.put(None)
        await _receive(socket)
        raise bad_request('nothing comes after {"end": true}')


async def _queued(queue: asyncio.Queue[bytes | None]) -> AsyncIterator[bytes]:
    while (frame := await queue.get()) is not None:
        yield frame


async def _answer(
    socket: WebSocket, ai: AsyncAiClient, options: dict[str, Any], queue: asyncio.Queue[bytes | None], held: Held
) -> None:
    """AsyncAiClient.remove_background_frames' loop (the SDK's window, its messages and answers),
    with the stream's start and end passed on to the client as well as its frames."""
    start = starting(**options)
    reading = Reading(new_request_id(), None)  # progress is passed on below
    window = reading.window = AsyncWindow()
    events = ai.transport.frames(MATTE_FRAMES, requests_off_the_loop(start, _queued(queue), window), reading.request_id)
    try:
        async for item in events:
            found = reading.read(item)
            if isinstance(found, FramesStarted):
                await socket.send_text(json.dumps({"started": asdict(found)}))
            elif isinstance(found, FrameOutput):
                held.answered()
                await _send_frame(socket, found)
            elif isinstance(found, FramesDone):
                await socket.send_text(json.dumps({"done": asdict(found)}))
            elif isinstance(found, Progress):
                await socket.send_text(json.dumps({"progress": event(found)}))
    finally:
        await events.aclose()


async def _send_frame(socket: WebSocket, frame: FrameOutput) -> None:
    """One frame's answer: its text message, then each output's bytes in the order it lists them."""
    images = frame.output.images
    outputs = [
        {"name": name, "format": image.format, "media_type": image.media_type, "has_alpha": image.has_alpha}
        for name, image in images.items()
    ]
    await socket.send_text(json.dumps({"frame": {"index": frame.index, **answered(frame.output), "outputs": outputs}}))
    for image in images.values():
        await socket.send_bytes(image.data)
