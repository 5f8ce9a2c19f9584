"""The words both sides of the wire use: defined once here, imported by the services, the SDK, the
command line, the web gateway and (through the gateway) the page.

`Reason` is the machine-readable contract of every error (google.rpc.ErrorInfo.reason); docs/API.md
lists them with what a caller does about each. `GatewayReason` are the web gateway's own (HTTP
only; docs/WEB.md).
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Stable machine-readable reasons (google.rpc.ErrorInfo.reason); docs/API.md lists them."""

    MISSING_APP_ID = "MISSING_APP_ID"
    BAD_APP_ID = "BAD_APP_ID"
    MISSING_APP_KEY = "MISSING_APP_KEY"
    BAD_APP_KEY = "BAD_APP_KEY"
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"
    TOO_MANY_SESSIONS = "TOO_MANY_SESSIONS"
    TOO_MANY_STREAMS = "TOO_MANY_STREAMS"
    MEMORY_BUDGET = "MEMORY_BUDGET"
    CALL_TIME_LIMIT = "CALL_TIME_LIMIT"
    FIELD_TOO_LONG = "FIELD_TOO_LONG"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    UNKNOWN_FEATURE = "UNKNOWN_FEATURE"
    UNKNOWN_RECIPE = "UNKNOWN_RECIPE"
    UNKNOWN_ENGINE = "UNKNOWN_ENGINE"
    RECIPE_UNAVAILABLE = "RECIPE_UNAVAILABLE"
    ROUTE_NOT_SET_UP = "ROUTE_NOT_SET_UP"
    ENGINE_NOT_INSTALLED = "ENGINE_NOT_INSTALLED"
    BAD_PICTURE = "BAD_PICTURE"
    EMPTY_PICTURE = "EMPTY_PICTURE"
    PICTURE_TOO_LARGE = "PICTURE_TOO_LARGE"
    BAD_PROMPT = "BAD_PROMPT"
    TOO_MANY_POINTS = "TOO_MANY_POINTS"
    TOO_MANY_PROMPTS = "TOO_MANY_PROMPTS"
    BAD_OPTIONS = "BAD_OPTIONS"
    BAD_OUTPUT = "BAD_OUTPUT"  # image.matte: an output that cannot be made as asked
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SOURCES_FAILED = "SOURCES_FAILED"
    FILE_MISMATCH = "FILE_MISMATCH"
    PREPARATION_FAILED = "PREPARATION_FAILED"
    MODEL_REFUSED = "MODEL_REFUSED"
    NO_SPACE = "NO_SPACE"
    UNSAFE_STORE = "UNSAFE_STORE"
    CATALOGUE_UNREACHABLE = "CATALOGUE_UNREACHABLE"
    LIMIT_REACHED = "LIMIT_REACHED"
    INTERNAL = "INTERNAL"


class GatewayReason(StrEnum):
    """The web gateway's own reasons, answered over HTTP only (a request it refuses before any call
    to the services, or could not read); docs/WEB.md lists them with their HTTP statuses."""

    BAD_REQUEST = "BAD_REQUEST"  # a request the gateway could not make into a call (the field named)
    NOT_FOUND = "NOT_FOUND"  # no such path
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    UPLOAD_TOO_LARGE = "UPLOAD_TOO_LARGE"
    HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"  # the request's headers or body came too slowly
    HOST_NOT_ALLOWED = "HOST_NOT_ALLOWED"  # a Host header the gateway does not answer for (DNS rebinding)
    TOO_MANY_CONNECTIONS = "TOO_MANY_CONNECTIONS"
    TOO_MANY_UPLOADS = "TOO_MANY_UPLOADS"  # the bodies held at once are at their bound
