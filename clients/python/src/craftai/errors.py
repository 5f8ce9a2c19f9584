"""What the SDK raises: one exception type carrying the service's code, reason and plain message."""

from __future__ import annotations

import grpc
import grpc.aio
from grpc_status import rpc_status

from craftai_wire.details import unpack
from craftai_wire.metadata import REQUEST_ID_KEY


class CraftAiError(Exception):
    """An error answered by a craft-ai service (or the channel), in plain words.

    `code` is the gRPC status code, `reason` the stable machine-readable reason
    (google.rpc.ErrorInfo; empty when the channel itself failed), `metadata` its details,
    `retry_after` the seconds the server asks to wait before trying again (google.rpc.RetryInfo,
    on limits), and `request_id` the id under which the server logged the request.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        metadata: dict[str, str] | None = None,
        violations: list[tuple[str, str]] | None = None,
        *,
        retry_after: float | None = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = metadata or {}
        self.violations = violations or []
        self.retry_after = retry_after
        self.request_id = request_id

    def __str__(self) -> str:
        return f"{self.message} ({self.code.name}{', ' + self.reason if self.reason else ''})"

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError) -> CraftAiError:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        message = (exc.details() if hasattr(exc, "details") else "") or code.name
        reason = ""
        metadata: dict[str, str] = {}
        violations: list[tuple[str, str]] = []
        retry_after: float | None = None
        request_id = ""
        status = None
        if isinstance(exc, grpc.Call | grpc.aio.AioRpcError):  # a blocking call's error, or an awaited one's
            try:
                status = rpc_status.from_call(exc)
            except ValueError:  # a status message that disagrees with the code: keep the code
                status = None
            for key, value in exc.trailing_metadata() or ():
                if key == REQUEST_ID_KEY:
                    request_id = value if isinstance(value, str) else value.decode(errors="replace")
        if status is not None:
            details = unpack(status)
            reason, metadata, violations, retry_after = (
                details.reason,
                details.metadata,
                details.violations,
                details.retry_after,
            )
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not reason and "larger than max" in message:
            message = (
                f"the message is larger than the gRPC message limit ({message}): send a smaller picture, "
                "or raise the limit on both sides (CRAFTAI_MAX_MESSAGE_BYTES on the server, "
                "max_message_bytes in AiClient)"
            )
        elif code == grpc.StatusCode.UNAVAILABLE and not reason:
            message = f"the service did not answer (UNAVAILABLE): {message}"
        return cls(code, message, reason, metadata, violations, retry_after=retry_after, request_id=request_id)
