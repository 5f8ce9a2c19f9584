"""Every RPC answers over a real channel; app ids, health, reflection and error details."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from craftai_dev import servers
from craftai_dev.files import U2NETP_SHA256, u2netp_onnx
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import (
    catalogue_pb2,
    catalogue_pb2_grpc,
    common_pb2,
    infer_pb2,
    infer_pb2_grpc,
    prepare_pb2,
    prepare_pb2_grpc,
)

APP = servers.app_metadata("tests")
MATTE = common_pb2.RouteRef(feature="image.matte")
CLICK = infer_pb2.Prompt(points=[infer_pb2.Point(x=1, y=1, label=infer_pb2.POINT_LABEL_FOREGROUND)])
# This server has not set image.segment up: its RPCs answer with these errors (never UNIMPLEMENTED).
ANSWERED_WITH = {
    "OpenSession": (grpc.StatusCode.FAILED_PRECONDITION, "ROUTE_NOT_SET_UP"),
    "Segment": (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
    "SegmentEverything": (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
    "SegmentOnce": (grpc.StatusCode.FAILED_PRECONDITION, "ROUTE_NOT_SET_UP"),
    "OpenCutout": (grpc.StatusCode.FAILED_PRECONDITION, "ROUTE_NOT_SET_UP"),
    "RefineCutout": (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
}


@pytest.fixture(scope="module")
def channel(matte_server: servers.Process) -> grpc.Channel:
    return loopback_channel(matte_server.address)


def _brought_u2netp() -> Iterator[prepare_pb2.SetupUpload]:
    """SetupFrom's stream: the route, then u2netp.onnx brought by the caller."""
    data = u2netp_onnx().read_bytes()
    route = common_pb2.RouteRef(feature="image.matte", recipe="u2netp", engine="onnxruntime")
    yield prepare_pb2.SetupUpload(route=prepare_pb2.SetupRequest(route=route))
    file = prepare_pb2.BroughtFile(folder="u2netp", name="u2netp.onnx", size=len(data), sha256=U2NETP_SHA256)
    yield prepare_pb2.SetupUpload(file=file)
    for start in range(0, len(data), 1 << 20):
        yield prepare_pb2.SetupUpload(chunk=data[start : start + (1 << 20)])


def _frames(photo: bytes) -> Iterator[infer_pb2.MatteFramesRequest]:
    """MatteFrames' stream: the options, then one frame (the photo, encoded)."""
    start = infer_pb2.MatteFramesRequest(start=infer_pb2.MatteFramesStart())
    start.start.matte.route.CopyFrom(MATTE)
    start.start.matte.outputs.add(kind=infer_pb2.MATTE_OUTPUT_KIND_MATTE)
    yield start
    yield infer_pb2.MatteFramesRequest(frame=infer_pb2.Frame(data=photo))


def _calls(channel: grpc.Channel, photo: bytes) -> dict[str, object]:
    c = catalogue_pb2_grpc.CatalogueServiceStub(channel)
    p = prepare_pb2_grpc.PrepareServiceStub(channel)
    i = infer_pb2_grpc.InferServiceStub(channel)
    return {
        "ListFeatures": lambda: c.ListFeatures(catalogue_pb2.ListFeaturesRequest(), metadata=APP, timeout=10),
        "ResolveRoute": lambda: c.ResolveRoute(
            catalogue_pb2.ResolveRouteRequest(route=MATTE), metadata=APP, timeout=10
        ),
        "GetRouteStates": lambda: c.GetRouteStates(catalogue_pb2.GetRouteStatesRequest(), metadata=APP, timeout=10),
        "Setup": lambda: list(p.Setup(prepare_pb2.SetupRequest(route=MATTE), metadata=APP, timeout=60)),
        "SetupFrom": lambda: list(p.SetupFrom(_brought_u2netp(), metadata=APP, timeout=60)),
        "GetRuntime": lambda: i.GetRuntime(infer_pb2.GetRuntimeRequest(), metadata=APP, timeout=10),
        "Load": lambda: list(i.Load(infer_pb2.LoadRequest(route=MATTE), metadata=APP, timeout=60)),
        "Matte": lambda: list(
            i.Matte(infer_pb2.MatteRequest(picture=common_pb2.Picture(data=photo)), metadata=APP, timeout=60)
        ),
        "MatteFrames": lambda: list(i.MatteFrames(_frames(photo), metadata=APP, timeout=60)),
        "OpenSession": lambda: list(
            i.OpenSession(
                infer_pb2.OpenSessionRequest(picture=common_pb2.Picture(data=photo)), metadata=APP, timeout=10
            )
        ),
        "Segment": lambda: list(
            i.Segment(infer_pb2.SegmentRequest(session_id="x", prompt=CLICK), metadata=APP, timeout=10)
        ),
        "SegmentEverything": lambda: list(
            i.SegmentEverything(infer_pb2.SegmentEverythingRequest(session_id="x"), metadata=APP, timeout=10)
        ),
        "SegmentOnce": lambda: list(
            i.SegmentOnce(
                infer_pb2.SegmentOnceRequest(picture=common_pb2.Picture(data=photo), prompt=CLICK),
                metadata=APP,
                timeout=10,
            )
        ),
        "OpenCutout": lambda: list(
            i.OpenCutout(
                infer_pb2.OpenCutoutRequest(matte=infer_pb2.MatteRequest(picture=common_pb2.Picture(data=photo))),
                metadata=APP,
                timeout=10,
            )
        ),
        "RefineCutout": lambda: list(
            i.RefineCutout(infer_pb2.RefineCutoutRequest(session_id="x"), metadata=APP, timeout=10)
        ),
        "CloseSession": lambda: i.CloseSession(infer_pb2.CloseSessionRequest(session_id="x"), metadata=APP, timeout=10),
    }


def test_every_rpc_answers(channel: grpc.Channel, photos: dict[str, Path]) -> None:
    calls = _calls(channel, photos["chelsea.png"].read_bytes())
    declared = {
        m.name
        for proto in (catalogue_pb2, prepare_pb2, infer_pb2)
        for service in proto.DESCRIPTOR.services_by_name.values()
        for m in service.methods
    }
    assert declared == set(calls)
    for name, call in calls.items():
        if name in ANSWERED_WITH:
            with pytest.raises(grpc.RpcError) as caught:
                call()  # type: ignore[operator]
            status = rpc_status.from_call(caught.value)
            info = error_details_pb2.ErrorInfo()
            assert status is not None and status.details[0].Unpack(info), name
            assert (caught.value.code(), info.reason) == ANSWERED_WITH[name], name
        else:
            assert call(), name  # type: ignore[operator]


def test_streams_end_with_exactly_one_result(channel: grpc.Channel, photos: dict[str, Path]) -> None:
    events = _calls(channel, photos["chelsea.png"].read_bytes())["Matte"]()  # type: ignore[operator]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    assert all(k == "progress" for k in kinds[:-1]) and kinds[:-1]


def test_a_request_without_app_id_is_unauthenticated(channel: grpc.Channel) -> None:
    stub = catalogue_pb2_grpc.CatalogueServiceStub(channel)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ListFeatures(catalogue_pb2.ListFeaturesRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "craftai-app-id" in (caught.value.details() or "")
    with pytest.raises(grpc.RpcError) as caught:
        list(
            infer_pb2_grpc.InferServiceStub(channel).Matte(
                infer_pb2.MatteRequest(), timeout=10, metadata=(("craftai-app-id", "bad id!"),)
            )
        )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_errors_carry_error_info_and_bad_request_details(channel: grpc.Channel) -> None:
    stub = infer_pb2_grpc.InferServiceStub(channel)
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Matte(infer_pb2.MatteRequest(picture=common_pb2.Picture(data=b"x")), metadata=APP, timeout=30))
    status = rpc_status.from_call(caught.value)
    assert status is not None
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert status.details[0].Unpack(info) and info.domain == "craftai.ai" and info.reason == "BAD_PICTURE"
    assert status.details[1].Unpack(bad) and bad.field_violations[0].field == "picture.data"


def test_health_per_service_and_reflection(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "craftai.v1.CatalogueService", "craftai.v1.PrepareService", "craftai.v1.InferService"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
    stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
    )
    names = {s.name for s in next(iter(stream)).list_services_response.service}
    assert {"craftai.v1.CatalogueService", "craftai.v1.PrepareService", "craftai.v1.InferService"} <= names


def test_route_states_report_ready_once_loaded(channel: grpc.Channel) -> None:
    stub = catalogue_pb2_grpc.CatalogueServiceStub(channel)
    reply = stub.GetRouteStates(catalogue_pb2.GetRouteStatesRequest(feature="image.matte"), metadata=APP, timeout=10)
    states = {(r.route.recipe, r.route.engine): r.state for r in reply.routes}
    assert states[("u2netp", "onnxruntime")] == catalogue_pb2.ROUTE_STATE_READY
    assert states[("inspyrenet-swinb", "torch")] == catalogue_pb2.ROUTE_STATE_MISSING
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRouteStates(catalogue_pb2.GetRouteStatesRequest(feature="image.blur"), metadata=APP, timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
