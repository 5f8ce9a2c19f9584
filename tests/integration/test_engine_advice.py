"""Engine advice is the catalogue's: a ResolveRoute or Setup without machine info makes the catalogue
ask the infer service (GetRuntime, a short deadline, an answer kept briefly), and assume no GPU,
saying so, when infer is down or silent. The SDK never asks infer for it.

Real catalogue, prepare and infer processes on loopback, infer forced to the CPU. No GPU answers on
this machine, so the GPU case is a stand-in infer service: a real gRPC server on loopback that
answers GetRuntime as a GPU machine would (and can be made slow), counting the questions."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from craftai import AiClient, Retries, SetupOutput
from craftai_common import local_tls
from craftai_dev import servers
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import (
    catalogue_pb2,
    common_pb2,
    infer_pb2,
    prepare_pb2,
    prepare_pb2_grpc,
)

pytestmark = pytest.mark.slow
MATTE = common_pb2.RouteRef(feature="image.matte")
NO_GPU = "so a machine without a GPU is assumed"
INFER = infer_pb2.DESCRIPTOR.services_by_name["InferService"].full_name


class StandInInfer:
    """GetRuntime as a GPU machine answers it, after `delay` seconds (released at teardown); the
    other RPCs are not served."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.asked = 0
        self.released = threading.Event()

    def runtime(self, request: infer_pb2.GetRuntimeRequest, context: grpc.ServicerContext) -> infer_pb2.Runtime:
        self.asked += 1
        self.released.wait(self.delay)
        return infer_pb2.Runtime(device="cuda:0", gpu_available=True, gpu_name="Stand-in GPU")


@contextmanager
def stand_in(servicer: StandInInfer) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.unary_unary_rpc_method_handler(
        servicer.runtime,
        request_deserializer=infer_pb2.GetRuntimeRequest.FromString,
        response_serializer=infer_pb2.Runtime.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(INFER, {"GetRuntime": handler}),))
    # A local server speaks TLS with the local certificate: the catalogue pins it on loopback.
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([local_tls.identity()]))
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        servicer.released.set()
        server.stop(grace=None)


def _catalogue(tmp_path: Path, recipes: Path, infer: str, **settings: str) -> servers.Process:
    env = {"CRAFTAI_STORE": str(tmp_path / "store"), "CRAFTAI_RECIPES": str(recipes), "CRAFTAI_INFER_ADDRESS": infer}
    return servers.start("catalogue", [str(servers.BIN / "craftai-catalogue")], {**env, **settings}, tmp_path)


def _client(catalogue: str, prepare: str = "", infer: str = "") -> AiClient:
    prepare, infer = prepare or catalogue, infer or catalogue
    return AiClient("tests", catalogue=catalogue, prepare=prepare, infer=infer, retries=Retries(attempts=0))


def _runtime_questions(infer: servers.Process) -> list[dict[str, Any]]:
    """The GetRuntime calls the infer service logged (JSON lines), with who asked."""
    entries = [json.loads(line) for line in infer.logs().splitlines() if line.startswith("{")]
    return [e for e in entries if e.get("logger") == "craftai.access" and str(e.get("rpc")).endswith("/GetRuntime")]


def test_the_catalogue_asks_infer_and_assumes_no_gpu_when_infer_is_down(tmp_path: Path, local_catalogue: Path) -> None:
    env = {"CRAFTAI_RECIPES": str(local_catalogue), "CRAFTAI_DEVICE": "cpu", "CRAFTAI_MACHINE_CACHE_SECONDS": "0"}
    processes = servers.separate(tmp_path / "store", tmp_path, env)
    infer = processes["infer"]
    try:
        with _client(processes["catalogue"].address, processes["prepare"].address, infer.address) as ai:
            advice = ai.resolve("image.matte")
            assert (advice.route.recipe, advice.route.engine) == ("u2netp", "onnxruntime")
            assert advice.reason.endswith(f"; the infer service at {infer.address} reports no GPU"), advice.reason

            result = list(ai.setup("image.matte", request_id="advice-setup-1"))[-1]
            assert isinstance(result, SetupOutput) and result.route.recipe == "u2netp"
            asked = _runtime_questions(infer)
            assert asked and {e["app_id"] for e in asked} == {"craftai-internal"}  # the SDK never asked
            assert any(e.get("request_id") == "advice-setup-1" for e in asked)  # prepare -> catalogue -> infer

            assert infer.stop() == 0
            down = ai.resolve("image.matte")
            assert down.route.recipe == "u2netp"
            assert f"; the infer service at {infer.address} did not answer (UNAVAILABLE), {NO_GPU}" in down.reason
            again = list(ai.setup("image.matte"))[-1]  # setting up needs no infer service
            assert isinstance(again, SetupOutput) and again.already_done
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
    assert codes == {"catalogue": 0, "prepare": 0, "infer": 0}, codes


def test_a_gpu_machine_gets_the_gpu_default_and_the_answer_is_kept_briefly(
    tmp_path: Path, local_catalogue: Path
) -> None:
    gpu = StandInInfer()
    with stand_in(gpu) as address:
        catalogue = _catalogue(tmp_path, local_catalogue, address, CRAFTAI_MACHINE_CACHE_SECONDS="1.5")
        with servers.running(catalogue), _client(catalogue.address) as ai:
            first = ai.resolve("image.matte")
            assert (first.route.recipe, first.route.engine) == ("inspyrenet-swinb", "torch")
            assert first.reason.endswith(f"; the infer service at {address} reports a GPU (Stand-in GPU)")
            assert ai.resolve("image.matte").route.recipe == "inspyrenet-swinb"
            assert gpu.asked == 1  # the second advice used the kept answer
            time.sleep(1.6)
            assert ai.resolve("image.matte").route.recipe == "inspyrenet-swinb"
            assert gpu.asked == 2  # kept no longer: asked again

            # A caller that names the machine (infer itself, older SDKs) is advised for it; infer is not asked.
            named = ai.catalogue_stub.ResolveRoute(
                catalogue_pb2.ResolveRouteRequest(route=MATTE, machine=catalogue_pb2.MachineInfo(gpu_available=False)),
                metadata=servers.app_metadata(),
                timeout=10,
            )
            assert named.route.recipe == "u2netp" and "infer service" not in named.reason
            assert gpu.asked == 2


def test_a_setup_request_that_names_the_machine_is_set_up_for_it(tmp_path: Path, local_catalogue: Path) -> None:
    """SetupRequest.gpu_available, when set, still decides (clients that ask infer themselves)."""
    with stand_in(StandInInfer()) as address:
        catalogue = _catalogue(tmp_path, local_catalogue, address)
        with servers.running(catalogue):
            env = {"CRAFTAI_STORE": str(tmp_path / "store"), "CRAFTAI_CATALOGUE_ADDRESS": catalogue.address}
            prepare = servers.start("prepare", [str(servers.BIN / "craftai-prepare")], env, tmp_path)
            with servers.running(prepare), loopback_channel(prepare.address) as channel:
                stub = prepare_pb2_grpc.PrepareServiceStub(channel)
                request = prepare_pb2.SetupRequest(route=MATTE, gpu_available=False)  # the stand-in says GPU
                events = list(stub.Setup(request, metadata=servers.app_metadata(), timeout=120))
            assert events[-1].result.route.recipe == "u2netp" and events[-1].result.files[0].downloaded


def test_a_silent_infer_costs_the_advice_its_short_deadline(tmp_path: Path, local_catalogue: Path) -> None:
    silent = StandInInfer(delay=30.0)
    with stand_in(silent) as address:
        catalogue = _catalogue(tmp_path, local_catalogue, address, CRAFTAI_INFER_TIMEOUT="0.5")
        with servers.running(catalogue), _client(catalogue.address) as ai:
            started = time.monotonic()
            advice = ai.resolve("image.matte")
            took = time.monotonic() - started
    assert advice.route.recipe == "u2netp" and silent.asked == 1
    assert f"; the infer service at {address} did not answer (DEADLINE_EXCEEDED), {NO_GPU}" in advice.reason
    assert took < 5.0, took
