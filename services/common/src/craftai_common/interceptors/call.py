"""What the gateway's interceptors know of one call, shared between them.

Every interceptor wraps the servicer's method in turn, and all of them run in the call's own task:
the first to run makes the call's `Call` and the others find it in a context variable (an
interceptor that needs what an earlier one learnt, the app or the request id, reads it there).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import grpc

from craftai_common import observability as obs

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


@dataclass(eq=False)
class Call:
    """One call as the interceptors see it; each fills in what its concern learns."""

    method: str
    service: str
    name: str
    peer: str
    task: asyncio.Task[Any] | None  # None once the call is over: no cycle through its task keeps its memory
    started: float = field(default_factory=time.perf_counter)
    request_id: str = ""  # the request log's
    app: str = ""  # authentication's, once the app's key was checked
    internal: bool = False  # the services calling each other (the service key)
    wildcard: bool = False  # admitted by a `*` key
    deadline: float = float("inf")  # time limits': time.monotonic() past which the call is ended
    writing_until: float | None = None  # a message is being written: by when the client must have taken it
    writing: Any = None  # that message, until its size has been added to `writing_until` (once it is late)
    ended: str = ""  # "max_duration" or "stalled_write" once the watchdog ended it


_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("craftai_gateway_call", default=None)


def begin(method: str, context: Context) -> tuple[Call, bool]:
    """The call this task serves, and whether it was made now (the caller then ends it: `end`)."""
    task = asyncio.current_task()
    call = _current.get()
    if call is not None and call.task is task and call.method == method:
        return call, False
    service, name = obs.split_method(method)
    # The peer is read now: once a call has ended (a cancelled stream is finalised later), asking
    # grpc for it reads freed memory (seen as a segfault with grpcio 1.85).
    call = Call(method, service, name, context.peer(), task)
    _current.set(call)
    return call, True


def end(call: Call) -> None:
    """The call is over: it lets go of its task (the task's context still holds the call)."""
    call.task = None


def metadata(context: Context, key: str) -> str | None:
    """A request metadata value as text (undecodable bytes replaced: it is checked after)."""
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None
