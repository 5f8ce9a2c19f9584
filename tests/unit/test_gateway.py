"""The gateway on a real gRPC server in this process (loopback): limits that bind whatever app ids a
caller makes up, the internal id only with the service key, strings bounded at the edge, ids that
match whole, app labels only for authenticated apps, calls ended past their time or when their
client stops reading, and health streams bounded (docs/SECURITY.md).

The methods behind the gateway are small test handlers (hold until released, stream big messages);
the features' own limits are tested on real services in tests/integration/test_hardening.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from craftai import CraftAiError
from craftai_common import observability as obs
from craftai_common.auth import INTERNAL_APP_ID, KeyRing
from craftai_common.interceptors import MAX_STRING, Gateway, Limits
from craftai_wire.channels import server_options
from craftai_wire.keys import key_line, new_key
from craftai_wire.v1 import common_pb2, infer_pb2

SERVICE = "tests.Gate"
VICTIM_KEY, WILDCARD_KEY, SERVICE_KEY = new_key(), new_key(), new_key()
MiB = 1 << 20


class Served:
    """A grpc.aio server with the gateway in front of three test methods, on its own loop thread."""

    def __init__(self, keys: KeyRing, limits: Limits, *, max_connection_age_s: float = 0.0) -> None:
        self.gateway = Gateway(keys, limits)
        self.health = health.aio.HealthServicer()
        self._released: asyncio.Event | None = None
        self.cancelled: list[str] = []  # handlers that saw their task cancelled
        self._age = max_connection_age_s
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        started: Future[int] = Future()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        self.address = f"127.0.0.1:{started.result(timeout=30)}"

    def _run(self, started: Future[int]) -> None:
        self._loop.run_until_complete(self._serve(started))

    async def _serve(self, started: Future[int]) -> None:
        self._stop = asyncio.Event()
        self._released = asyncio.Event()
        options = server_options(64 * MiB, max_connection_age_s=self._age, grace_s=1.0)
        server = grpc.aio.server(interceptors=self.gateway.interceptors, options=options)
        handlers = {
            "Hold": grpc.unary_unary_rpc_method_handler(
                self._hold,
                request_deserializer=infer_pb2.SegmentRequest.FromString,
                response_serializer=common_pb2.Notice.SerializeToString,
            ),
            "Stream": grpc.unary_stream_rpc_method_handler(
                self._stream,
                request_deserializer=infer_pb2.SegmentRequest.FromString,
                response_serializer=common_pb2.Notice.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        started.set_result(port)
        await self._stop.wait()
        await server.stop(0)
        await self.gateway.close()

    async def _hold(self, request: infer_pb2.SegmentRequest, context: Any) -> common_pb2.Notice:
        assert self._released is not None
        try:
            await self._released.wait()
        except asyncio.CancelledError:
            self.cancelled.append("hold")
            raise
        return common_pb2.Notice(code="OK", message=request.session_id[:10])

    async def _stream(self, request: infer_pb2.SegmentRequest, context: Any) -> AsyncIterator[common_pb2.Notice]:
        assert self._released is not None
        try:
            for _ in range(4):  # each bigger than the flow-control window: a client that does not read stalls it
                yield common_pb2.Notice(code="BIG", message="x" * MiB)
            await self._released.wait()  # then quiet, until released
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled.append("stream")
            raise

    def release(self) -> None:
        """Let every held call answer (and every later one at once)."""
        assert self._released is not None
        self._loop.call_soon_threadsafe(self._released.set)

    def close(self) -> None:
        self.release()
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KeyRing:
    """A keys file with one app of its own (victim) and a wildcard key (any other app id)."""
    monkeypatch.setenv("CRAFTAI_SERVICE_KEY", SERVICE_KEY)
    path = tmp_path / "keys"
    path.write_text(key_line("victim", VICTIM_KEY) + key_line("*", WILDCARD_KEY))
    path.chmod(0o600)
    return KeyRing(path)


@pytest.fixture
def serve(keys: KeyRing) -> Iterator[Callable[..., Served]]:
    """Start a server with the given limits (closed after the test)."""
    started: list[Served] = []

    def start(limits: Limits | None = None, *, age: float = 0.0) -> Served:
        started.append(Served(keys, limits or Limits(), max_connection_age_s=age))
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.close()


def _metadata(app: str, key: str | None, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
    items = [("craftai-app-id", app)]
    if key is not None:
        items.append(("craftai-app-key", key))
    if request_id is not None:
        items.append(("x-request-id", request_id))
    return tuple(items)


def _hold(channel: grpc.Channel) -> Any:
    return channel.unary_unary(
        f"/{SERVICE}/Hold",
        request_serializer=infer_pb2.SegmentRequest.SerializeToString,
        response_deserializer=common_pb2.Notice.FromString,
    )


def _stream(channel: grpc.Channel) -> Any:
    return channel.unary_stream(
        f"/{SERVICE}/Stream",
        request_serializer=infer_pb2.SegmentRequest.SerializeToString,
        response_deserializer=common_pb2.Notice.FromString,
    )


def _wait_for(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _refused(channel: grpc.Channel, app: str, key: str) -> CraftAiError:
    with pytest.raises(grpc.RpcError) as caught:
        _hold(channel)(infer_pb2.SegmentRequest(), metadata=_metadata(app, key), timeout=5)
    return CraftAiError.from_rpc(caught.value)


def test_no_mix_of_made_up_ids_takes_more_than_the_wildcard_share(serve: Callable[..., Served]) -> None:
    served = serve(Limits(per_app=2, wildcard=3, per_service=5, internal=1))
    with grpc.insecure_channel(served.address) as channel:
        hold = _hold(channel)
        request = infer_pb2.SegmentRequest()
        held = [hold.future(request, metadata=_metadata("made-up-1", WILDCARD_KEY), timeout=30) for _ in range(2)]
        _wait_for(lambda: served.gateway.in_flight == 2)
        over_app = _refused(channel, "made-up-1", WILDCARD_KEY)
        assert (over_app.reason, over_app.metadata["scope"], over_app.retry_after) == ("TOO_MANY_REQUESTS", "app", 1.0)
        held.append(hold.future(request, metadata=_metadata("made-up-2", WILDCARD_KEY), timeout=30))
        _wait_for(lambda: served.gateway.in_flight == 3)
        for made_up in ("made-up-3", "made-up-4", "made-up-5"):  # new ids do not buy new room
            over_pool = _refused(channel, made_up, WILDCARD_KEY)
            assert (over_pool.code, over_pool.metadata["scope"]) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "wildcard")
            assert "CRAFTAI_MAX_WILDCARD_REQUESTS" in over_pool.message and over_pool.retry_after == 1.0

        # The app with a key of its own still gets in: up to its own limit, then the service's.
        held += [hold.future(request, metadata=_metadata("victim", VICTIM_KEY), timeout=30) for _ in range(2)]
        _wait_for(lambda: served.gateway.in_flight == 5)
        assert _refused(channel, "victim", VICTIM_KEY).metadata["scope"] == "app"

        # The services' own calls: their own limit, not counted against the apps', and only with the
        # service key (the wildcard key, which is the local key in local mode, never makes a service).
        held.append(hold.future(request, metadata=_metadata(INTERNAL_APP_ID, SERVICE_KEY), timeout=30))
        _wait_for(lambda: served.gateway.in_flight == 6)
        assert _refused(channel, INTERNAL_APP_ID, SERVICE_KEY).metadata["scope"] == "internal"
        assert _refused(channel, INTERNAL_APP_ID, WILDCARD_KEY).reason == "BAD_APP_KEY"

        served.release()
        assert [f.result(timeout=10).code for f in held] == ["OK"] * 6
        _wait_for(lambda: served.gateway.in_flight == 0)
        assert hold(request, metadata=_metadata("made-up-9", WILDCARD_KEY), timeout=5).code == "OK"


def test_the_service_limit_binds_apps_with_keys_of_their_own_too(serve: Callable[..., Served]) -> None:
    served = serve(Limits(per_app=0, wildcard=0, per_service=3))
    with grpc.insecure_channel(served.address) as channel:
        hold = _hold(channel)
        held = [
            hold.future(infer_pb2.SegmentRequest(), metadata=_metadata("victim", VICTIM_KEY), timeout=30)
            for _ in range(3)
        ]
        _wait_for(lambda: served.gateway.in_flight == 3)
        over = _refused(channel, "other", WILDCARD_KEY)
        assert over.metadata["scope"] == "service" and "CRAFTAI_MAX_REQUESTS" in over.message
        served.gateway.start_draining()  # a stopping server: apps refused, the services' calls served
        assert _refused(channel, "other", WILDCARD_KEY).reason == "SHUTTING_DOWN"
        internal = hold.future(infer_pb2.SegmentRequest(), metadata=_metadata(INTERNAL_APP_ID, SERVICE_KEY))
        _wait_for(lambda: served.gateway.in_flight == 4)
        served.release()
        assert internal.result(timeout=10).code == "OK" and all(f.result(timeout=10).code == "OK" for f in held)


def test_strings_are_bounded_at_the_edge_and_never_echoed_whole(serve: Callable[..., Served]) -> None:
    served = serve()
    with grpc.insecure_channel(served.address) as channel:
        hold = _hold(channel)
        served.release()
        for request, field in (
            (infer_pb2.SegmentRequest(session_id="s" * MiB), "session_id"),
            (infer_pb2.SegmentRequest(prompt=infer_pb2.Prompt()), None),
        ):
            if field is None:
                assert hold(request, metadata=_metadata("app", WILDCARD_KEY), timeout=5).code == "OK"
                continue
            with pytest.raises(grpc.RpcError) as caught:
                hold(request, metadata=_metadata("app", WILDCARD_KEY), timeout=5)
            error = CraftAiError.from_rpc(caught.value)
            assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "FIELD_TOO_LONG")
            assert error.violations == [(field, error.message)] and len(error.message) < 200
            assert f"at most {MAX_STRING}" in error.message and "sss" not in error.message
        just = infer_pb2.SegmentRequest(session_id="s" * MAX_STRING)
        assert hold(just, metadata=_metadata("app", WILDCARD_KEY), timeout=5).code == "OK"


def _hpack_int(value: int, prefix_bits: int = 7) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out, value = bytearray([limit]), value - limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes([*out, value])


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _raw_call(address: str, metadata: tuple[tuple[str, str], ...]) -> str:
    """One gRPC call written as HTTP/2 frames by hand (gRPC's own clients refuse a newline in a
    metadata value, other clients need not), and how the server ended it: "END_STREAM" (headers
    closing the stream: a status was delivered) or "RST_STREAM"."""
    import socket

    host, port = address.rsplit(":", 1)
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"/{SERVICE}/Hold"),
        (":authority", address),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *metadata,
    ]
    block = b"".join(
        b"\x00" + _hpack_int(len(k)) + k.encode() + _hpack_int(len(v)) + v.encode() for k, v in headers
    )  # literal fields, never indexed, no Huffman coding
    message = infer_pb2.SegmentRequest().SerializeToString()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + _frame(4, 0, 0, b"")  # SETTINGS
            + _frame(1, 0x4, 1, block)  # HEADERS, END_HEADERS
            + _frame(0, 0x1, 1, b"\x00" + len(message).to_bytes(4, "big") + message)  # DATA, END_STREAM
        )
        data = b""
        while True:
            while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
                length, kind, flags = int.from_bytes(data[:3], "big"), data[3], data[4]
                stream = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
                data = data[9 + length :]
                if kind == 4 and not flags & 0x1:
                    sock.sendall(_frame(4, 0x1, 0, b""))  # acknowledge the server's settings
                if stream == 1 and kind == 3:
                    return "RST_STREAM"
                if stream == 1 and kind == 1 and flags & 0x1:
                    return "END_STREAM"
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk


def test_ids_with_a_final_newline_are_refused_or_replaced(serve: Callable[..., Served]) -> None:
    served = serve()
    served.release()
    refused = obs.REFUSED.labels(SERVICE, "Hold", "BAD_APP_ID")
    before = refused._value.get()
    assert _raw_call(served.address, _metadata("rawnl\n", WILDCARD_KEY)) == "END_STREAM"
    assert refused._value.get() == before + 1  # not served as a second app "rawnl"
    # A request id that would not survive in the trailers is replaced: the status is delivered.
    answered = obs.REQUESTS.labels(SERVICE, "Hold", "app", "OK")
    before = answered._value.get()
    assert _raw_call(served.address, _metadata("app", WILDCARD_KEY, "id-with-newline\n")) == "END_STREAM"
    assert answered._value.get() == before + 1


def test_unauthenticated_calls_take_no_app_label(serve: Callable[..., Served]) -> None:
    served = serve()
    served.release()
    before = set(obs._app_labels)
    with grpc.insecure_channel(served.address) as channel:
        hold = _hold(channel)
        for n in range(250):  # more than the 200 labels there are
            with pytest.raises(grpc.RpcError):
                hold(infer_pb2.SegmentRequest(), metadata=_metadata(f"spray-{n}", "craftai_wrong"), timeout=5)
        assert hold(infer_pb2.SegmentRequest(), metadata=_metadata("victim", VICTIM_KEY), timeout=5).code == "OK"
    assert set(obs._app_labels) - before <= {"victim"}
    sample = obs.REQUESTS.labels(SERVICE, "Hold", obs.UNAUTHENTICATED_LABEL, "UNAUTHENTICATED")
    assert sample._value.get() >= 250


def test_a_call_past_its_time_is_ended_and_its_slot_freed(serve: Callable[..., Served]) -> None:
    served = serve(Limits(max_call_seconds=0.5))
    with grpc.insecure_channel(served.address) as channel:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:  # the client set no deadline: the server's own ends it
            _hold(channel)(infer_pb2.SegmentRequest(), metadata=_metadata("app", WILDCARD_KEY))
        took = time.monotonic() - started
    error = CraftAiError.from_rpc(caught.value)
    assert (error.code, error.reason) == (grpc.StatusCode.DEADLINE_EXCEEDED, "CALL_TIME_LIMIT")
    assert "CRAFTAI_MAX_CALL_SECONDS" in error.message and 0.5 <= took < 5.0
    _wait_for(lambda: served.gateway.in_flight == 0)
    assert served.cancelled == ["hold"]


def test_a_stream_its_client_stops_reading_is_ended(serve: Callable[..., Served]) -> None:
    """The handler is ended when its message has waited 0.5 s and a second per MiB of it (its slot
    and memory freed at once), and the HTTP/2 stream itself when the server renews the connection
    (here after 1 s + 1 s grace)."""
    served = serve(Limits(stalled_write_seconds=0.5), age=1.0)
    options = [("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 64 * MiB)]  # a small window
    with grpc.insecure_channel(served.address, options=options) as channel:
        stream = _stream(channel)(infer_pb2.SegmentRequest(), metadata=_metadata("app", WILDCARD_KEY))
        _wait_for(lambda: served.gateway.in_flight == 1)
        _wait_for(lambda: served.gateway.in_flight == 0, seconds=5)  # the stall was seen, the slot freed
        assert served.cancelled == ["stream"]
        ended = obs.ENDED.labels(SERVICE, "Stream", "stalled_write")._value.get()
        assert ended >= 1
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:  # reading now: what was sent, then the end
            for _ in stream:
                pass
        assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert time.monotonic() - started < 10


def test_a_large_message_gets_a_second_per_mib_measured_only_once_late() -> None:
    """The stalled-write limit of a message: CRAFTAI_STALLED_WRITE_SECONDS, then, once that passed,
    a second per MiB of it (measured then, not for every message sent)."""
    from craftai_common.interceptors.call import Call
    from craftai_common.interceptors.time_limits import TimeLimits

    limits = TimeLimits(Limits(stalled_write_seconds=0.5))
    call = Call("/m", "s", "n", "peer", None)
    answer = infer_pb2.MatteResult()
    answer.matte.data = b"\x00" * (3 * MiB)
    limits.sending(call, answer)
    assert call.writing is answer and call.writing_until is not None
    first = call.writing_until
    assert not limits._late(call, first - 0.1)  # within the first limit: nothing measured
    assert call.writing is answer
    assert not limits._late(call, first + 2.0)  # past it: 3 s more for its 3 MiB
    assert call.writing is None and first + 3.0 <= call.writing_until < first + 3.1
    assert limits._late(call, first + 3.2)
    limits.sent(call)
    assert call.writing_until is None and not limits._late(call, first + 100)


def test_health_watch_streams_are_bounded_in_number_and_time(serve: Callable[..., Served]) -> None:
    served = serve(Limits(open_streams=3, max_call_seconds=1.0))
    with grpc.insecure_channel(served.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watches = [stub.Watch(health_pb2.HealthCheckRequest(service="")) for _ in range(3)]
        for watch in watches:
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        _wait_for(lambda: served.gateway.open_streams == 3)
        with pytest.raises(grpc.RpcError) as caught:
            next(stub.Watch(health_pb2.HealthCheckRequest(service="")))
        error = CraftAiError.from_rpc(caught.value)
        assert (error.code, error.reason, error.retry_after) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TOO_MANY_STREAMS",
            1.0,
        )
        assert stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status  # probes never refused
        for watch in watches:  # each ended by the server after its time (a watcher then watches again)
            with pytest.raises(grpc.RpcError) as ended:
                next(watch)
            assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        _wait_for(lambda: served.gateway.open_streams == 0)
        assert next(stub.Watch(health_pb2.HealthCheckRequest(service=""))).status


def test_the_sessions_gauge_caps_its_app_labels(tmp_path: Path) -> None:
    """Sessions of more app ids than there are labels: the gauge's labels stay within the cap
    (the rest counted as "other"), its total unchanged."""
    import numpy as np

    from craftai_common.catalogue_client import CatalogueClient
    from craftai_common.store import Store
    from craftai_infer.device import DeviceInfo
    from craftai_infer.loader import RouteLoader
    from craftai_infer.metrics import InferCollector
    from craftai_infer.sessions import SessionStore

    sessions = SessionStore(1 << 30, 900.0)
    apps = [f"sessions-app-{n}" for n in range(obs.MAX_APP_LABELS + 50)]
    for app in apps:
        sessions.open(app, np.zeros(4, np.float32), width=1, height=1, route=None, device="cpu")
    routes = RouteLoader(CatalogueClient(""), Store(tmp_path), DeviceInfo(False, "", "cpu"), cpu_threads=1)
    (gauge,) = [m for m in InferCollector(sessions, routes).collect() if m.name == "craftai_infer_sessions"]
    labels = {sample.labels["app"] for sample in gauge.samples}
    assert len(labels) <= obs.MAX_APP_LABELS + 1 and "other" in labels
    assert sum(sample.value for sample in gauge.samples) == len(apps)


def test_the_long_string_check_reads_strings_and_messages_not_bytes() -> None:
    """Every string is checked, in nested and repeated messages and in maps; a picture's bytes are
    not a string (and are never read: reading a bytes field copies its megabytes)."""
    from craftai_common.interceptors.string_bounds import long_string as _long_string

    picture = common_pb2.Picture(data=b"\xff" * (3 << 20))
    request = infer_pb2.OpenSessionRequest(picture=picture, route=common_pb2.RouteRef(recipe="sam"))
    assert _long_string(request) is None
    request.route.engine = "e" * (MAX_STRING + 1)
    assert _long_string(request) == ("route.engine", MAX_STRING + 1)
    several = infer_pb2.SegmentRequest(session_id="s", prompts=[infer_pb2.Prompt(), infer_pb2.Prompt()])
    assert _long_string(several) is None
    timing = common_pb2.Timing(stages_ms={"d" * (MAX_STRING + 2): 1.0})
    assert _long_string(timing) == ("stages_ms", MAX_STRING + 2)
