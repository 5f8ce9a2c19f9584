"""gRPC channel options every craft-ai channel uses: servers, their peers and the SDK alike."""

from __future__ import annotations

import json

from craftai_wire.targets import balanced

ChannelOptions = list[tuple[str, int | str]]

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


def client_options(max_message_bytes: int) -> ChannelOptions:
    """A client channel: the message limits, and a restarted server found again within seconds
    (gRPC's default reconnect backoff grows to two minutes)."""
    return [
        *message_limits(max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", 250),
        ("grpc.max_reconnect_backoff_ms", 3000),
    ]


def target_options(options: ChannelOptions, target: str) -> ChannelOptions:
    """`options` for a channel to `target`: with `BALANCING` when the target is balanced."""
    return [*options, ("grpc.service_config", json.dumps(BALANCING))] if balanced(target) else list(options)
