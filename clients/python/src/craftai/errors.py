"""What the SDK raises: one exception type carrying the service's code, reason and plain message."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


class CraftAiError(Exception):
    """An error answered by a craft-ai service (or the channel), in plain words.

    `code` is the gRPC status code, `reason` the stable machine-readable reason
    (google.rpc.ErrorInfo; empty when the channel itself failed), `metadata` its details.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        metadata: dict[str, str] | None = None,
        violations: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = metadata or {}
        self.violations = violations or []

    def __str__(self) -> str:
        return f"{self.message} ({self.code.name}{', ' + self.reason if self.reason else ''})"

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError) -> CraftAiError:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        message = (exc.details() if hasattr(exc, "details") else "") or code.name
        reason = ""
        metadata: dict[str, str] = {}
        violations: list[tuple[str, str]] = []
        status = rpc_status.from_call(exc) if isinstance(exc, grpc.Call) else None
        if status is not None:
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                bad = error_details_pb2.BadRequest()
                if detail.Unpack(info):
                    reason, metadata = info.reason, dict(info.metadata)
                elif detail.Unpack(bad):
                    violations = [(v.field, v.description) for v in bad.field_violations]
        return cls(code, message, reason, metadata, violations)
