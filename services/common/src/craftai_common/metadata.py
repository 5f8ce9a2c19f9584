"""Reading the request metadata on the server side (the keys are named in craftai_wire.metadata)."""

from __future__ import annotations

from typing import Any

import grpc

from craftai_wire.metadata import APP_ID_KEY


def metadata_value(context: grpc.aio.ServicerContext[Any, Any], key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def app_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The calling app's id (already validated by the interceptor)."""
    return metadata_value(context, APP_ID_KEY) or ""
