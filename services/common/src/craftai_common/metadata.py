"""Request metadata every RPC carries: the app id (required) and an optional request id."""

from __future__ import annotations

import re
from typing import Any

import grpc

APP_ID_KEY = "craftai-app-id"
REQUEST_ID_KEY = "x-request-id"
APP_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# RPCs that infrastructure calls without an app id.
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")


def metadata_value(context: grpc.aio.ServicerContext[Any, Any], key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def app_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The calling app's id (already validated by the interceptor)."""
    return metadata_value(context, APP_ID_KEY) or ""
