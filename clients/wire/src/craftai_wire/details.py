"""The google.rpc details an error status carries, written by the services and read by the SDK.

`ErrorInfo` (domain craftai.ai, a stable reason, metadata) for programs, `BadRequest` field
violations for a bad request, `RetryInfo` on limits. One codec, so both sides agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "craftai.ai"


@dataclass(frozen=True)
class ErrorDetails:
    """What a status says beyond its code and message."""

    reason: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    violations: list[tuple[str, str]] = field(default_factory=list)  # (field, description)
    retry_after: float | None = None  # seconds


def pack(code: int, message: str, details: ErrorDetails) -> status_pb2.Status:
    """The status message (google.rpc.Status) with the details packed in."""
    packed = []
    info = error_details_pb2.ErrorInfo(reason=details.reason, domain=DOMAIN, metadata=details.metadata)
    packed.append(_any(info))
    if details.violations:
        violations = [
            error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in details.violations
        ]
        packed.append(_any(error_details_pb2.BadRequest(field_violations=violations)))
    if details.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(round(details.retry_after * 1000))
        packed.append(_any(error_details_pb2.RetryInfo(retry_delay=delay)))
    return status_pb2.Status(code=code, message=message, details=packed)


def unpack(status: status_pb2.Status) -> ErrorDetails:
    """The details found in a status; details of other kinds are passed over."""
    reason, metadata, violations, retry_after = "", {}, [], None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        bad = error_details_pb2.BadRequest()
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason, metadata = info.reason, dict(info.metadata)
        elif detail.Unpack(bad):
            violations = [(v.field, v.description) for v in bad.field_violations]
        elif detail.Unpack(retry):
            retry_after = retry.retry_delay.ToMilliseconds() / 1000
    return ErrorDetails(reason, metadata, violations, retry_after)


def _any(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed
