"""The services' errors as HTTP answers: one status per gRPC code and reason, the same plain
message, the reason and the fields for programs, Retry-After where the server asked for a wait.

| HTTP | when |
|---|---|
| 400 | a bad picture, prompt or option (INVALID_ARGUMENT), a request the gateway cannot read |
| 401 | no app key or app id (MISSING_APP_KEY, MISSING_APP_ID, BAD_APP_ID) |
| 403 | a key that is not one of the app's (BAD_APP_KEY), PERMISSION_DENIED |
| 404 | an unknown session (SESSION_NOT_FOUND), feature, recipe or engine |
| 409 | the route is not set up (ROUTE_NOT_SET_UP): POST /api/v1/setup first |
| 412 | any other FAILED_PRECONDITION (the model was refused, a preparation failed) |
| 413 | an upload over the gateway's limit, a picture over the pixel limits, a message over gRPC's |
| 429 | the app's limits (TOO_MANY_REQUESTS, TOO_MANY_SESSIONS, ...), with Retry-After |
| 503 | the services are draining (SHUTTING_DOWN) or cannot be reached, with Retry-After when known |
| 504 | a deadline passed |
"""

from __future__ import annotations

import math
from typing import Any

import grpc
from starlette.responses import JSONResponse

from craftai.errors import CraftAiError

TOO_LARGE_REASONS = frozenset({"PICTURE_TOO_LARGE", "LIMIT_REACHED", "UPLOAD_TOO_LARGE"})
MISSING_CREDENTIALS = frozenset({"MISSING_APP_KEY", "MISSING_APP_ID", "BAD_APP_ID"})
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


def http_status(error: CraftAiError) -> int:
    """The HTTP status of a service's error (the table above)."""
    if error.reason in TOO_LARGE_REASONS:
        return 413
    if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not error.reason and "message limit" in error.message:
        return 413  # gRPC's own message limit (the SDK's message names the settings)
    if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "NO_SPACE":
        return 507
    if error.reason in MISSING_CREDENTIALS:
        return 401
    if error.reason == "ROUTE_NOT_SET_UP":
        return 409
    if error.code == grpc.StatusCode.UNAVAILABLE and error.reason == "SOURCES_FAILED":
        return 502
    return BY_CODE.get(error.code, 500)


def error_body(error: CraftAiError) -> dict[str, Any]:
    """The JSON of an error: {"error": {status, code, reason, message, violations, request_id}}."""
    return {
        "error": {
            "status": http_status(error),
            "code": error.code.name,
            "reason": error.reason,
            "message": error.message,
            "violations": [{"field": f, "description": d} for f, d in error.violations],
            "metadata": error.metadata,
            "request_id": error.request_id,
        }
    }


def error_headers(error: CraftAiError) -> dict[str, str]:
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    elif http_status(error) == 503:
        headers["Retry-After"] = "1"
    if http_status(error) == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="craftai"'
    if error.request_id:
        headers["X-Request-Id"] = error.request_id
    return headers


def error_response(error: CraftAiError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=http_status(error), headers=error_headers(error))


def bad_request(message: str, reason: str = "BAD_REQUEST", field: str | None = None) -> CraftAiError:
    """An error of the gateway's own reading (the request could not be made into a call)."""
    violations = [(field, message)] if field else []
    return CraftAiError(grpc.StatusCode.INVALID_ARGUMENT, message, reason, violations=violations)


def too_large(limit: int) -> CraftAiError:
    return CraftAiError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the upload is larger than the gateway's limit of {limit:,} bytes (CRAFTAI_WEB_MAX_UPLOAD_BYTES)",
        "UPLOAD_TOO_LARGE",
        metadata={"limit": str(limit)},
    )
