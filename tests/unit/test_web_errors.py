"""Every row of the gateway's error table (craftai.web.errors, docs/WEB.md): the HTTP status of
each gRPC code and reason, and the headers a client acts on, a reason on every error, the
credentials' words in HTTP terms. tests/web checks the mappings real services produce end to end;
these are the rows a loopback stack cannot easily provoke (412, 502, 504, 507, gRPC's own message
limit) beside the others."""

from __future__ import annotations

import json

import grpc
import pytest

from craftai.errors import CraftAiError
from craftai.web.errors import error_response, http_status

Code = grpc.StatusCode
ROWS = [
    (Code.INVALID_ARGUMENT, "BAD_PICTURE", "the file is not a picture", 400),
    (Code.INVALID_ARGUMENT, "TOO_MANY_POINTS", "65 points per side is more than 64", 400),
    (Code.UNAUTHENTICATED, "MISSING_APP_KEY", "no app key", 401),
    (Code.UNAUTHENTICATED, "MISSING_APP_ID", "no app id", 401),
    (Code.UNAUTHENTICATED, "BAD_APP_KEY", "not one of the app's keys", 403),
    (Code.PERMISSION_DENIED, "", "not allowed", 403),
    (Code.NOT_FOUND, "SESSION_NOT_FOUND", "no such session", 404),
    (Code.NOT_FOUND, "UNKNOWN_RECIPE", "no such recipe", 404),
    (Code.FAILED_PRECONDITION, "ROUTE_NOT_SET_UP", "set up image.matte first", 409),
    (Code.FAILED_PRECONDITION, "MODEL_REFUSED", "the model file was refused", 412),
    (Code.FAILED_PRECONDITION, "PREPARATION_FAILED", "the conversion failed", 412),
    (Code.INVALID_ARGUMENT, "PICTURE_TOO_LARGE", "over the pixel limit", 413),
    (Code.RESOURCE_EXHAUSTED, "LIMIT_REACHED", "over the session budget", 413),
    (Code.RESOURCE_EXHAUSTED, "", "the answer is over the message limit (CRAFTAI_MAX_MESSAGE_BYTES)", 413),
    (Code.RESOURCE_EXHAUSTED, "TOO_MANY_SESSIONS", "the app keeps too many pictures", 429),
    (Code.RESOURCE_EXHAUSTED, "NO_SPACE", "the store's disk is full", 507),
    (Code.UNAVAILABLE, "SOURCES_FAILED", "every source of the file failed", 502),
    (Code.UNAVAILABLE, "SHUTTING_DOWN", "the server is shutting down", 503),
    (Code.UNAVAILABLE, "", "the server cannot be reached", 503),
    (Code.DEADLINE_EXCEEDED, "", "the deadline passed", 504),
]
HTTP_WORDS = {
    "MISSING_APP_KEY": "'Authorization: Bearer <app key>'",
    "BAD_APP_KEY": "'Authorization: Bearer <app key>'",
    "MISSING_APP_ID": "the header Craftai-App-Id",
}


@pytest.mark.parametrize(
    ("code", "reason", "message", "status"), ROWS, ids=[f"{r[3]}-{r[1] or r[0].name}" for r in ROWS]
)
def test_each_error_has_its_http_status_and_the_services_words(
    code: grpc.StatusCode, reason: str, message: str, status: int
) -> None:
    error = CraftAiError(code, message, reason, request_id="r-1")
    assert http_status(error) == status
    response = error_response(error)
    body = json.loads(bytes(response.body))["error"]
    assert response.status_code == status and (body["status"], body["code"]) == (status, code.name)
    assert (body["reason"], body["request_id"]) == (reason or code.name, "r-1")  # a reason always
    if reason in HTTP_WORDS:  # the services' words name the SDK's arguments: said in HTTP terms
        assert HTTP_WORDS[reason] in body["message"] and "app_key=" not in body["message"]
    else:
        assert body["message"] == message
    assert response.headers["x-request-id"] == "r-1"
    assert ("www-authenticate" in response.headers) == (status == 401)
    assert ("retry-after" in response.headers) == (status == 503)  # none was asked: 503 says 1 s


def test_retry_after_is_the_servers_wait_rounded_up() -> None:
    limited = CraftAiError(Code.RESOURCE_EXHAUSTED, "too many calls", "TOO_MANY_REQUESTS", retry_after=2.2)
    assert error_response(limited).headers["retry-after"] == "3"
    draining = CraftAiError(Code.UNAVAILABLE, "shutting down", "SHUTTING_DOWN", retry_after=0.1)
    assert error_response(draining).headers["retry-after"] == "1"
