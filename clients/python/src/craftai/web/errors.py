"""The services' errors, and the gateway's own refusals, as HTTP answers: one status per gRPC code
and reason (docs/WEB.md, Errors, has the table), the same plain message, the reason and the fields
for programs, Retry-After where the server asked for a wait."""

from __future__ import annotations

import json
import math
from http import HTTPStatus
from typing import Any

import grpc
from starlette.responses import JSONResponse

from craftai.errors import CraftAiError
from craftai_wire.vocabulary import GatewayReason, Reason

TOO_LARGE_REASONS = frozenset({Reason.PICTURE_TOO_LARGE, Reason.LIMIT_REACHED, GatewayReason.UPLOAD_TOO_LARGE})
MISSING_CREDENTIALS = frozenset({Reason.MISSING_APP_KEY, Reason.MISSING_APP_ID, Reason.BAD_APP_ID})
BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 403,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 412,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.CANCELLED: 499,
}
# The gateway's own refusals (GatewayReason) that are not their gRPC code's usual status.
BY_GATEWAY_REASON = {
    GatewayReason.HEADERS_TOO_LARGE: 431,
    GatewayReason.REQUEST_TIMEOUT: 408,
    GatewayReason.TOO_MANY_CONNECTIONS: 503,
    GatewayReason.TOO_MANY_UPLOADS: 503,
    GatewayReason.NOT_FOUND: 404,
    GatewayReason.METHOD_NOT_ALLOWED: 405,
}


def http_status(error: CraftAiError) -> int:
    """The HTTP status of a service's error (the table above)."""
    if error.reason in BY_GATEWAY_REASON:
        return BY_GATEWAY_REASON[GatewayReason(error.reason)]
    if error.reason in TOO_LARGE_REASONS:
        return 413
    if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not error.reason and "message limit" in error.message:
        return 413  # gRPC's own message limit (the SDK's message names the settings)
    if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == Reason.NO_SPACE:
        return 507
    if error.reason in MISSING_CREDENTIALS:
        return 401
    if error.reason == Reason.ROUTE_NOT_SET_UP:
        return 409
    if error.code == grpc.StatusCode.UNAVAILABLE and error.reason == Reason.SOURCES_FAILED:
        return 502
    return BY_CODE.get(error.code, 500)


def spoken_over_http(error: CraftAiError) -> str:
    """The error's message for an HTTP caller: the services' words about credentials name the SDK's
    arguments, gRPC metadata and the server's key file, none of which an HTTP caller has (nor should
    learn a server path from); the gateway says it in headers instead."""
    app = error.metadata.get("app", "")
    if error.reason == Reason.MISSING_APP_KEY:
        return (
            f"app '{app}' sent no key: send it as 'Authorization: Bearer <app key>' "
            "(or the header Craftai-App-Key), the app id in Craftai-App-Id; the link `craftai serve --web` "
            "prints carries the local key, and `craftai keys add <app id>` makes one"
        )
    if error.reason == Reason.BAD_APP_KEY:
        return (
            f"the key sent for app '{app}' is not one of its keys here: check 'Authorization: Bearer <app key>' "
            "and the app id in Craftai-App-Id"
        )
    if error.reason in (Reason.MISSING_APP_ID, Reason.BAD_APP_ID):
        return (
            "the app id (the header Craftai-App-Id) must be 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return error.message


def error_body(error: CraftAiError, status: int | None = None) -> dict[str, Any]:
    """The JSON of an error: {"error": {status, code, reason, message, violations, request_id}}."""
    return {
        "error": {
            "status": status or http_status(error),
            "code": error.code.name,
            "reason": error.reason or error.code.name,  # none from the services: gRPC's own (UNAVAILABLE, …)
            "message": spoken_over_http(error),
            "violations": [{"field": f, "description": d} for f, d in error.violations],
            "metadata": error.metadata,
            "request_id": error.request_id,
        }
    }


def error_headers(error: CraftAiError, status: int | None = None) -> dict[str, str]:
    headers: dict[str, str] = {}
    status = status or http_status(error)
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    elif status == 503:
        headers["Retry-After"] = "1"
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="craftai"'
    if error.request_id:
        headers["X-Request-Id"] = error.request_id
    return headers


def error_response(error: CraftAiError, status: int | None = None) -> JSONResponse:
    """The error's answer, at its status (the table above) unless `status` is given (an HTTP error
    of the framework's own, whose status is already decided)."""
    status = status or http_status(error)
    return JSONResponse(error_body(error, status), status_code=status, headers=error_headers(error, status))


def raw_answer(error: CraftAiError) -> bytes:
    """The error as a whole HTTP/1.1 answer in bytes, for a connection the gateway closes before (or
    instead of) a request reaches the app: a head too large or too slow, a connection too many."""
    status = http_status(error)
    body = json.dumps(error_body(error), separators=(",", ":")).encode()
    head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Content-Type: application/json"]
    head += [f"{name}: {value}" for name, value in (error_headers(error) | {"Connection": "close"}).items()]
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def gateway_error(reason: GatewayReason, message: str, **metadata: str) -> CraftAiError:
    """A refusal of the gateway's own (its status: BY_GATEWAY_REASON, else 400)."""
    code = grpc.StatusCode.UNAVAILABLE if BY_GATEWAY_REASON.get(reason) == 503 else grpc.StatusCode.INVALID_ARGUMENT
    return CraftAiError(code, message, reason, metadata=metadata)


def bad_request(message: str, reason: str = GatewayReason.BAD_REQUEST, field: str | None = None) -> CraftAiError:
    """An error of the gateway's own reading (the request could not be made into a call)."""
    violations = [(field, message)] if field else []
    return CraftAiError(grpc.StatusCode.INVALID_ARGUMENT, message, reason, violations=violations)


def too_large(limit: int) -> CraftAiError:
    return gateway_error(
        GatewayReason.UPLOAD_TOO_LARGE,
        f"the upload is larger than the gateway's limit of {limit:,} bytes (CRAFTAI_WEB_MAX_UPLOAD_BYTES)",
        limit=str(limit),
    )
