"""Who calls: the app id and key of an HTTP request, and the services as that app (the `Caller`
dependency of every endpoint). The gateway holds no key of its own and lends none: a request
without a key goes to the services without one."""

from __future__ import annotations

from typing import Annotated

import grpc
from fastapi import Depends, Request
from starlette.datastructures import Headers

from craftai.client import AsyncAiClient
from craftai.errors import CraftAiError
from craftai.web.errors import gateway_error
from craftai_wire.keys import MAX_KEY_LENGTH
from craftai_wire.vocabulary import GatewayReason, Reason

MAX_APP_ID_LENGTH = 64  # craftai_wire.metadata.APP_ID_PATTERN's longest


def credentials(headers: Headers, default_app_id: str) -> tuple[str, str | None]:
    """The caller's app id (Craftai-App-Id, else the gateway's default) and key (Authorization:
    Bearer <key>, else Craftai-App-Key); none is made up: a call without a key goes without one.
    A value longer than any the services accept is refused here (431), before it becomes gRPC
    metadata (whose own limit would answer with no reason)."""
    key: str | None = None
    authorization = headers.get("authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise CraftAiError(
                grpc.StatusCode.UNAUTHENTICATED,
                "the Authorization header is 'Bearer <app key>'",
                Reason.MISSING_APP_KEY,
            )
        key = token.strip()
    key = key or headers.get("craftai-app-key") or None
    app_id = headers.get("craftai-app-id") or default_app_id
    for name, value, longest in (("app id", app_id, MAX_APP_ID_LENGTH), ("app key", key or "", MAX_KEY_LENGTH)):
        if len(value) > longest:
            raise gateway_error(
                GatewayReason.HEADERS_TOO_LARGE,
                f"the {name} is {len(value):,} characters long; the services accept at most {longest}",
            )
        if not (value.isascii() and value.isprintable()):
            raise CraftAiError(
                grpc.StatusCode.UNAUTHENTICATED, "app ids and keys are printable ASCII", Reason.BAD_APP_ID
            )
    return app_id, key


async def caller(request: Request) -> AsyncAiClient:
    """The services as the caller's app (its id and key), on the gateway's channels."""
    app_id, key = credentials(request.headers, request.app.state.settings.app_id)
    root: AsyncAiClient = request.app.state.root
    return root.for_app(app_id, key)


Caller = Annotated[AsyncAiClient, Depends(caller)]
