"""The server options every craft-ai server uses (craftai_wire.channels), on a real gRPC server on
loopback, with the keepalive periods scaled down from minutes to a fraction of a second: a call
during which the server sends nothing for many of the client's ping periods is not cut (a server
that ignored its minimum ping interval keeps gRPC's five minutes with two strikes and closes the
connection with "too_many_pings" after the client's third ping), and a second server cannot bind
a port a server listens on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from craftai_wire.channels import client_options, server_options

MiB = 1 << 20
CLIENT_PING_MS = 200  # the client pings a quiet call this often (60 s in production)
SERVER_MIN_PING_MS = 100  # and the server accepts that (10 s in production)
SILENT_SECONDS = 6.0  # many client pings: a server keeping gRPC's default minimum cut the call after ~3 s
METHOD = "/test.Quiet/Wait"


def _wait(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    time.sleep(SILENT_SECONDS)
    yield b"done"


def _server(options: list[tuple[str, Any]]) -> grpc.Server:
    server = grpc.server(ThreadPoolExecutor(max_workers=2), options=options)
    handler = grpc.method_handlers_generic_handler("test.Quiet", {"Wait": grpc.unary_stream_rpc_method_handler(_wait)})
    server.add_generic_rpc_handlers((handler,))
    return server


@pytest.fixture
def address() -> Iterator[str]:
    server = _server(server_options(4 * MiB, max_connection_age_s=0, grace_s=1, min_client_ping_ms=SERVER_MIN_PING_MS))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def test_a_call_silent_for_many_ping_periods_is_not_cut(address: str) -> None:
    with grpc.insecure_channel(address, options=client_options(4 * MiB, keepalive_ms=CLIENT_PING_MS)) as channel:
        wait: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(METHOD)
        call: Any = wait(b"", timeout=30)
        assert list(call) == [b"done"]
        assert call.code() == grpc.StatusCode.OK


def test_a_second_server_on_the_same_port_cannot_bind(address: str) -> None:
    """gRPC turns SO_REUSEPORT on unless told not to: two servers would share one port."""
    second = _server(server_options(4 * MiB, max_connection_age_s=0, grace_s=1))
    try:
        with pytest.raises(RuntimeError):
            second.add_insecure_port(address)
    finally:
        second.stop(0)
