"""Request bodies: bounded before they are read (`BodyLimit`), and the picture of a request taken
from a multipart form or from the raw body (`read_upload`). No URL is ever fetched: a picture is
what the caller sends."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from craftai.web.errors import bad_request, error_response, too_large

PICTURE_FIELDS = ("picture", "file", "image")  # the form field of the picture (rembg's clients send "file")


class BodyTooLarge(HTTPException):
    """The body passed the limit while it was being read (a chunked upload without a length)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large(limit).message)
        self.limit = limit


class BodyLimit:
    """ASGI middleware: a request that declares a Content-Length over `limit` is answered 413 before
    any of its body is read (and the connection closed); a body without a length is counted as it
    arrives and refused as soon as it passes the limit, so nothing larger is ever held."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            response = error_response(
                too_large(self.limit) if declared.isdigit() else bad_request("the Content-Length is not a number")
            )
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, counted, send)


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
