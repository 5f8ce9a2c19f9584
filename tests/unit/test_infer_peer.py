"""The catalogue's questions to the infer service (craftai_catalogue.infer_peer): a silent infer
service is said once per outage in the log, not once per question (every resolve asks), and its
return is said too. A real gRPC server on loopback answers GetRuntime; before it starts and after
it stops, nothing listens on its port."""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import pytest

from craftai_catalogue.infer_peer import InferPeer
from craftai_dev import servers
from craftai_wire.v1 import infer_pb2

INFER = infer_pb2.DESCRIPTOR.services_by_name["InferService"].full_name


async def _serving(port: int) -> grpc.aio.Server:
    async def runtime(
        request: infer_pb2.GetRuntimeRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> infer_pb2.Runtime:
        return infer_pb2.Runtime(device="cpu", gpu_available=False)

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        runtime,
        request_deserializer=infer_pb2.GetRuntimeRequest.FromString,
        response_serializer=infer_pb2.Runtime.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(INFER, {"GetRuntime": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def test_a_silent_infer_service_is_warned_about_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    port = servers.free_port()
    peer = InferPeer(f"127.0.0.1:{port}", timeout=0.5, machine_ttl=0.0)  # no Peers: a plain channel
    caplog.set_level(logging.INFO, logger="craftai.catalogue")
    try:
        for _ in range(3):  # nothing listens yet
            machine = await peer.machine()
            assert not machine.gpu_available and "a machine without a GPU is assumed" in machine.source
        assert [r.levelname for r in caplog.records] == ["WARNING"], caplog.text
        server = await _serving(port)
        try:
            for _ in range(60):  # the channel reconnects after its backoff (a second or two)
                answered = await peer.machine()
                if "reports" in answered.source:
                    break
                await asyncio.sleep(0.25)
        finally:
            await server.stop(None)
        assert "reports no GPU" in answered.source
        assert "answers again" in caplog.records[-1].getMessage()
        await peer.machine()  # a new outage: said again, once
        await peer.machine()
        assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"], caplog.text
    finally:
        await peer.close()
