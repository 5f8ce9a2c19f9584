"""Metrics and logs of a real `craftai serve` (matte_server, metrics on their own port): request
counts and latency per RPC and app, in-flight calls, loaded routes, the route-resolution cache,
sessions, preparation jobs; one JSON object per log line, with the request id the client set (or
the server made, returned in the trailing metadata)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, CraftAiError
from craftai_common.auth import INTERNAL_APP_ID
from craftai_dev import servers
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc


def _sample(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    found = servers.labelled(samples, name, **labels)
    assert found, f"no sample {name} {labels}"
    return sum(found)


def _metrics_once(process: servers.Process, settled: Callable[[dict[str, float]], bool]) -> dict[str, float]:
    """/metrics once `settled` holds (10 s at most).

    A refused call's status leaves the server before its handler has unwound (grpc's
    `context.abort` sends it, then raises), so the client can ask for the metrics a moment
    before that call is counted."""
    deadline = time.monotonic() + 10
    while True:
        samples = process.metrics()
        if settled(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.02)


@pytest.fixture(scope="module")
def client(matte_server: servers.Process) -> AiClient:
    return AiClient("observed-app", target=matte_server.address)


def test_metrics_per_rpc_and_app_and_the_services_own(
    matte_server: servers.Process, client: AiClient, photos: dict[str, Path]
) -> None:
    before = matte_server.metrics()
    client.remove_background(photos["chelsea.png"], outputs="matte")
    client.remove_background(photos["chelsea.png"], outputs="matte")
    with pytest.raises(CraftAiError):
        client.remove_background(b"not a picture", outputs="matte")
    matte = {"service": "craftai.v1.InferService", "method": "Matte", "app": "observed-app"}
    after = _metrics_once(
        matte_server, lambda s: sum(servers.labelled(s, "craftai_request_duration_seconds_count", **matte)) >= 3
    )
    assert _sample(after, "craftai_requests_total", code="OK", **matte) == 2
    assert _sample(after, "craftai_requests_total", code="INVALID_ARGUMENT", **matte) == 1
    assert _sample(after, "craftai_request_duration_seconds_count", **matte) == 3
    assert _sample(after, "craftai_request_duration_seconds_bucket", le="+Inf", **matte) == 3
    assert _sample(after, "craftai_requests_in_flight", service="craftai.v1.InferService", method="Matte") == 0
    assert _sample(after, "craftai_infer_loaded_routes", recipe="u2netp", engine="onnxruntime", device="cpu") == 1
    assert _sample(after, "craftai_infer_model_queue_depth", recipe="u2netp") == 0
    hits = _sample(after, "craftai_infer_route_resolutions_total", source="cache")
    assert hits - _sample(before, "craftai_infer_route_resolutions_total", source="cache") >= 2
    assert _sample(after, "craftai_infer_route_resolutions_total", source="catalogue") >= 1
    assert _sample(after, "craftai_infer_session_budget_bytes") == 1 << 30
    assert _sample(after, "craftai_infer_session_lookups_total", result="hit") >= 0
    assert _sample(after, "craftai_prepare_jobs_total", outcome="ok") >= 1
    assert _sample(after, "craftai_prepare_jobs_running") == 0
    assert _sample(after, "process_resident_memory_bytes") > 50 << 20
    internal = {"service": "craftai.v1.CatalogueService", "method": "ResolveRoute", "app": "craftai-internal"}
    assert _sample(after, "craftai_requests_total", code="OK", **internal) >= 1


def test_a_refused_call_is_counted_by_reason(matte_server: servers.Process) -> None:
    with loopback_channel(matte_server.address) as channel, pytest.raises(grpc.RpcError):
        infer_pb2_grpc.InferServiceStub(channel).GetRuntime(
            infer_pb2.GetRuntimeRequest(), metadata=(("craftai-app-id", "observed-app"),), timeout=10
        )
    samples = matte_server.metrics()
    assert _sample(samples, "craftai_requests_refused_total", method="GetRuntime", reason="MISSING_APP_KEY") >= 1


def _log_lines(process: servers.Process) -> list[dict[str, object]]:
    lines = [line for line in process.logs().splitlines() if line.startswith("{")]
    return [json.loads(line) for line in lines]


def test_json_logs_carry_the_request_id_the_client_set(
    matte_server: servers.Process, client: AiClient, photos: dict[str, Path]
) -> None:
    result = client.remove_background(photos["chelsea.png"], outputs="matte", request_id="trace-me-42")
    assert result.request_id == "trace-me-42"
    entries = _log_lines(matte_server)
    assert entries and all({"time", "level", "service", "logger", "message"} <= set(e) for e in entries)
    mine = [e for e in entries if e.get("request_id") == "trace-me-42"]
    accesses = [e for e in mine if e["logger"] == "craftai.access"]
    matte = "/craftai.v1.InferService/Matte"
    (access,) = [e for e in accesses if e["rpc"] == matte and e["code"] == "OK"]  # the call that answered, once
    # any other line of that id: an attempt the SDK retried (a busy machine), never a second OK; or a
    # call the server made to the catalogue for it (its route resolved again once the cached
    # resolution was a minute old), which carries the same id so that both logs can be joined
    for other in (e for e in accesses if e is not access):
        retried = other["rpc"] == matte and other["code"] in ("UNAVAILABLE", "RESOURCE_EXHAUSTED")
        internal = other["app_id"] == INTERNAL_APP_ID and other["rpc"] != matte
        assert retried or internal, other
    assert access["app_id"] == "observed-app" and access["service"] == "serve" and access["level"] == "INFO"
    assert isinstance(access["duration_ms"], float) and str(access["peer"]).startswith("ipv4:127.0.0.1:")
    assert str(access["time"]).endswith("+00:00")


def test_the_server_makes_a_request_id_when_absent_and_returns_it(matte_server: servers.Process) -> None:
    with loopback_channel(matte_server.address) as channel:
        stub = infer_pb2_grpc.InferServiceStub(channel)
        _, call = stub.GetRuntime.with_call(infer_pb2.GetRuntimeRequest(), metadata=servers.app_metadata(), timeout=10)
        (made,) = [v for k, v in call.trailing_metadata() or () if k == "x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", str(made))
        metadata = (*servers.app_metadata(), ("x-request-id", "given-1"))
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Matte(infer_pb2.MatteRequest(), metadata=metadata, timeout=10))
        assert "given-1" in str(caught.value.trailing_metadata())
    assert CraftAiError.from_rpc(caught.value).request_id == "given-1"
    assert any(e.get("request_id") == made for e in _log_lines(matte_server))
