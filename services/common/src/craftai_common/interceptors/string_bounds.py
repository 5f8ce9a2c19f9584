"""Every string of a request is at most MAX_STRING characters (INVALID_ARGUMENT / FIELD_TOO_LONG,
naming the field): names and ids are far shorter, and nothing past the edge handles a string
whose length an app chose."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from craftai_common.errors import ServiceError
from craftai_common.interceptors.base import Interceptor, refuse
from craftai_common.interceptors.call import Call, Context
from craftai_wire.vocabulary import Reason

MAX_STRING = 128  # characters of any string in a request (names and ids are far shorter)


class StringBounds(Interceptor):
    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        too_long = long_string(request) if isinstance(request, Message) else None
        if too_long is not None:
            path, length = too_long
            message = f"{path} is {length:,} characters long; at most {MAX_STRING} are accepted"
            await refuse(
                call,
                context,
                ServiceError(
                    grpc.StatusCode.INVALID_ARGUMENT, Reason.FIELD_TOO_LONG, message, violations=[(path, message)]
                ),
            )
        yield


def long_string(message: Message, prefix: str = "") -> tuple[str, int] | None:
    """The first string of `message` (fields, repeated fields, nested messages, maps) longer than
    MAX_STRING, as (its path, its length); None when every one is short enough.

    Only string and message fields are read: reading a bytes field copies it out of the message
    (a picture sent as its pixels is megabytes of copying and fresh pages a request)."""
    for descriptor in message.DESCRIPTOR.fields:
        kind = descriptor.type
        if kind not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        name = descriptor.name
        if not descriptor.is_repeated and kind == FieldDescriptor.TYPE_MESSAGE and not message.HasField(name):
            continue
        value = getattr(message, name)
        entry = descriptor.message_type if kind == FieldDescriptor.TYPE_MESSAGE else None
        if entry is not None and entry.GetOptions().map_entry:
            values = [*value.keys(), *value.values()]  # a map: its keys and its values
        else:
            values = list(value) if descriptor.is_repeated else [value]
        for item in values:
            if isinstance(item, str) and len(item) > MAX_STRING:
                return prefix + name, len(item)
            if isinstance(item, Message) and (found := long_string(item, prefix + name + ".")) is not None:
                return found
    return None
