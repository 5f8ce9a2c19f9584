"""gRPC channel and server options every craft-ai channel uses: servers, their peers and the SDK alike.

Keepalive is agreed here once for both sides: a client pings a quiet connection every minute (so a
long stream over a dead network is noticed), the server pings its clients as often and drops a
connection that does not answer within 20 s (so a vanished client's streams are freed), and the
server accepts client pings every 10 s at most (more often is abuse: gRPC closes the connection).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from craftai_wire.targets import balanced

ChannelOptions = list[tuple[str, int | str]]

KEEPALIVE_MS = 60_000  # ping a quiet connection this often
KEEPALIVE_TIMEOUT_MS = 20_000  # and drop it when the ping is not answered within this
MIN_CLIENT_PING_MS = 10_000  # the most often a server accepts a client's ping without data
IDLE_CONNECTION_MS = 600_000  # a server closes a connection without calls after this (clients reconnect)

# Client-side load balancing (docs/DEPLOY.md, Scaling), for a balanced target (targets.balanced:
# `dns:///name`, or several addresses: a Kubernetes headless Service, a compose service with
# replicas, an `ipv4:a,b` list): one subchannel per address and calls spread over them in turn; a
# subchannel whose server reports anything but SERVING on grpc.health.v1 (starting, or draining
# for a stop) gets none. Any other target behaves as before: one connection.
BALANCING = {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}


def message_limits(max_message_bytes: int) -> list[tuple[str, int]]:
    """Explicit message size limits, the same both ways (docs/API.md "Limits")."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def client_options(max_message_bytes: int, *, keepalive_ms: int = KEEPALIVE_MS) -> list[tuple[str, int]]:
    """A client channel: the message limits, keepalive within the servers' policy, and a restarted
    server found again within seconds (gRPC's default reconnect backoff grows to two minutes)."""
    return [
        *message_limits(max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", 250),
        ("grpc.max_reconnect_backoff_ms", 3000),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),  # a long stream of rare messages is still watched
    ]


def target_options(options: Sequence[tuple[str, int | str]], target: str) -> ChannelOptions:
    """`options` for a channel to `target`: with `BALANCING` when the target is balanced (which may
    look its name up: an asyncio caller asks `balanced` off its event loop and calls
    `balancing_options` itself)."""
    return balancing_options(options, balanced(target))


def balancing_options(options: Sequence[tuple[str, int | str]], spread: bool) -> ChannelOptions:
    """`options`, with `BALANCING` when the channel spreads its calls over the target's replicas."""
    return [*options, ("grpc.service_config", json.dumps(BALANCING))] if spread else list(options)


def server_options(
    max_message_bytes: int,
    *,
    max_connection_age_s: float,
    grace_s: float,
    min_client_ping_ms: int = MIN_CLIENT_PING_MS,
) -> list[tuple[str, int]]:
    """A server: the message limits, keepalive (dead clients dropped, pings more often than
    `min_client_ping_ms` refused: a client of ours pings a quiet call every KEEPALIVE_MS, so a call
    silent for minutes is never cut), idle connections closed, one server per port (gRPC would let
    a second server bind the same port beside the first and share its connections), and every
    connection renewed after `max_connection_age_s` (0: never): it is asked to reconnect (GOAWAY),
    its calls get `grace_s` to finish, then it is closed, which is what finally frees a stream whose
    client stopped reading (docs/SECURITY.md, "Streams that end")."""
    options = [
        *message_limits(max_message_bytes),
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", min_client_ping_ms),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS),
        ("grpc.so_reuseport", 0),
    ]
    if max_connection_age_s > 0:
        options += [
            ("grpc.max_connection_age_ms", int(max_connection_age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(grace_s * 1000)),
        ]
    return options
