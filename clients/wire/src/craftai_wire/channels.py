"""gRPC channel options every craft-ai channel uses: servers, their peers and the SDK alike."""

from __future__ import annotations


def message_limits(max_message_bytes: int) -> list[tuple[str, int]]:
    """Explicit message size limits, the same both ways (docs/API.md "Limits")."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def client_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """A client channel: the message limits, and a restarted server found again within seconds
    (gRPC's default reconnect backoff grows to two minutes)."""
    return [
        *message_limits(max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", 250),
        ("grpc.max_reconnect_backoff_ms", 3000),
    ]
