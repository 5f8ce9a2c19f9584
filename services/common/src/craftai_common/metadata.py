"""Reading the request metadata on the server side (the keys are named in craftai_wire.metadata)."""

from __future__ import annotations

import contextvars
from typing import Any

import grpc

from craftai_wire.metadata import APP_ID_KEY

# Who shares the server's budgets and turns (sessions, the models' queues) as one: an app with a
# key of its own is its own tenant; every app id a `*` key admits (or any, with keys off) is one
# tenant together, so that made-up ids cannot multiply a caller's share. Set by the gateway once the
# key was checked (craftai_common.interceptors.authentication).
WILDCARD_TENANT = "*"
tenant_var: contextvars.ContextVar[str] = contextvars.ContextVar("craftai_tenant", default="")


def metadata_value(context: grpc.aio.ServicerContext[Any, Any], key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def app_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The calling app's id (already validated by the interceptor)."""
    return metadata_value(context, APP_ID_KEY) or ""


def tenant(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The calling app's tenant (`tenant_var`; its app id where no gateway set one)."""
    return tenant_var.get() or app_id(context)
