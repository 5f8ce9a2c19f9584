"""Request bodies: bounded in size, in time and in number before they are read (`BodyLimit`), and the
picture of a request taken from a multipart form or from the raw body (`read_upload`). No URL is
ever fetched: a picture is what the caller sends."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from craftai.web.errors import bad_request, error_response, gateway_error, too_large
from craftai_wire.vocabulary import GatewayReason

PICTURE_FIELDS = ("picture", "file", "image")  # the form field of the picture (rembg's clients send "file")


class BodyTooLarge(HTTPException):
    """The body passed the limit while it was being read (a chunked upload without a length)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large(limit).message)
        self.limit = limit


class BodyTooSlow(HTTPException):
    """The body kept the gateway waiting longer than its allowance (CRAFTAI_WEB_BODY_*)."""

    def __init__(self, received: int) -> None:
        super().__init__(408, f"the request's body came too slowly ({received:,} bytes received); send it again")


@dataclass
class BodyRules:
    """How large a body may be, how long it may keep the gateway waiting, and how many bytes of
    bodies the gateway holds at once."""

    max_upload_bytes: int
    max_body_bytes: int
    timeout_seconds: float
    min_rate: int
    held: int = field(default=0)


class BodyLimit:
    """ASGI middleware, before any of a body is read:

    - a request that declares a Content-Length over the upload limit is answered 413 (a body without
      a length is counted as it arrives and refused as soon as it passes the limit);
    - the body's bytes (its length, or the upload limit when it has none) are reserved from the
      bodies' budget until its answer, so the gateway never holds more than that budget of bodies;
      a request that does not fit is answered 503 with Retry-After, on its headers;
    - while the gateway waits for it, a body gets `timeout_seconds` plus one second per `min_rate`
      bytes received: a client that sends nothing, or too slowly, is answered 408 and its
      connection closed (only the time spent waiting on the client counts); once the body is
      whole, nothing more is timed (an answer streamed for minutes waits on the client's leaving).
    """

    def __init__(self, app: ASGIApp, rules: BodyRules) -> None:
        self.app = app
        self.rules = rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rules = self.rules
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > rules.max_upload_bytes):
            error = (
                too_large(rules.max_upload_bytes)
                if declared.isdigit()
                else bad_request("the Content-Length is not a number")
            )
            await error_response(error)(scope, receive, send)
            return
        if b"transfer-encoding" not in headers and int(declared or 0) == 0:
            await self.app(scope, receive, send)
            return
        reserved = int(declared) if declared is not None else rules.max_upload_bytes
        if rules.held + reserved > rules.max_body_bytes:
            busy = gateway_error(
                GatewayReason.TOO_MANY_UPLOADS,
                f"the gateway holds {rules.held:,} bytes of uploads already, and {rules.max_body_bytes:,} at most "
                "(CRAFTAI_WEB_MAX_BODY_BYTES): try again in a moment",
            )
            await error_response(busy)(scope, receive, send)
            return
        rules.held += reserved
        received = 0
        waited = 0.0
        whole = False

        async def counted() -> Message:
            nonlocal received, waited, whole
            if whole:  # the body is in: what is awaited now is the client leaving (an event stream's
                return await receive()  # answer may take minutes), which is not the body's pace
            allowance = rules.timeout_seconds + received / rules.min_rate - waited
            started = time.monotonic()
            try:
                async with asyncio.timeout(max(allowance, 0.0)):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow(received) from None
            finally:
                waited += time.monotonic() - started
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > rules.max_upload_bytes:
                    raise BodyTooLarge(rules.max_upload_bytes)
                whole = not message.get("more_body", False)
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            rules.held -= reserved


@dataclass
class Upload:
    """What a request sent: the picture's bytes, other files by field name (a background picture),
    and the text fields of a form (options, as the query string gives them)."""

    picture: bytes
    files: dict[str, bytes] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)


async def read_upload(request: Request) -> Upload:
    """The picture from a multipart form (field `picture`, `file` or `image`) or the raw body (any
    content type: the service decides what is a picture and says so in plain words)."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        return Upload(await request.body())
    async with request.form(max_files=4, max_fields=32) as form:
        files: dict[str, bytes] = {}
        fields: dict[str, str] = {}
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                files[name] = await value.read()
            else:
                fields[name] = value
    found = next((name for name in PICTURE_FIELDS if name in files), None)
    if found is None:
        raise bad_request(
            "the form has no picture: send it as the file field 'picture' (or the raw picture as the body)",
            field="picture",
        )
    picture = files.pop(found)
    return Upload(picture, files, fields)
