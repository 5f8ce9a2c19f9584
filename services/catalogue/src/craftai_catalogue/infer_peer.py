"""What the catalogue asks the infer service (GetRuntime): which routes it has loaded (for route
states) and the machine it runs on (for engine advice when a caller gives no machine info).

Every question has a short deadline: a silent infer service costs a route-states or resolve call
at most that long, and the answer says what was assumed instead. The machine changes rarely, so
an answer about it is kept a short while; loaded routes are asked afresh each time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from craftai_catalogue.states import RouteKey
from craftai_common.peers import Peers
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc

log = logging.getLogger("craftai.catalogue")


@dataclass(frozen=True)
class Machine:
    """The machine the advice is for, and in plain words where that came from."""

    gpu_available: bool
    gpu_name: str
    source: str


class InferPeer:
    """The infer service as the catalogue sees it; `address` empty: not configured (never asked)."""

    def __init__(
        self,
        address: str,
        peers: Peers | None = None,
        *,
        timeout: float = 2.0,
        machine_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.peers = peers
        self.timeout = timeout
        self.machine_ttl = machine_ttl
        self._clock = clock
        self._channel: grpc.aio.Channel | None = None
        self._machine: tuple[float, Machine] | None = None  # (when asked, answer)
        self._silent = False  # the last question went unanswered: said once per outage in the log

    async def _ask(self) -> tuple[infer_pb2.Runtime | None, str]:
        """The runtime, or None and why not (plain words)."""
        if not self.address:
            return None, "no infer service is configured (CRAFTAI_INFER_ADDRESS)"
        if self._channel is None:
            self._channel = self.peers.channel(self.address) if self.peers else grpc.aio.insecure_channel(self.address)
        stub = infer_pb2_grpc.InferServiceStub(self._channel)
        try:
            runtime = await stub.GetRuntime(
                infer_pb2.GetRuntimeRequest(), timeout=self.timeout, metadata=Peers.metadata()
            )
        except grpc.aio.AioRpcError as exc:
            return None, f"the infer service at {self.address} did not answer ({exc.code().name})"
        if self._silent:
            log.info("the infer service at %s answers again", self.address)
            self._silent = False
        self._machine = (self._clock(), self._machine_of(runtime))
        return runtime, ""

    def _machine_of(self, runtime: infer_pb2.Runtime) -> Machine:
        found = f"a GPU ({runtime.gpu_name})" if runtime.gpu_available else "no GPU"
        return Machine(runtime.gpu_available, runtime.gpu_name, f"the infer service at {self.address} reports {found}")

    async def loaded_routes(self) -> set[RouteKey] | None:
        """(feature, recipe, engine) of each route loaded warm; None when infer is not configured
        or silent (route states then stop at PREPARED)."""
        runtime, _ = await self._ask()
        if runtime is None:
            return None
        return {(r.route.feature, r.route.recipe, r.route.engine) for r in runtime.loaded}

    async def machine(self) -> Machine:
        """The infer service's machine (an answer at most `machine_ttl` seconds old); when it does
        not answer, a machine without a GPU, saying so."""
        if self._machine is not None and self._clock() - self._machine[0] < self.machine_ttl:
            return self._machine[1]
        runtime, why = await self._ask()
        if runtime is None:
            # once while infer stays silent (every resolve asks: a log line each was noise), then
            # "answers again" when it does
            if not self._silent:
                log.warning("engine advice without machine info: %s; assuming no GPU until it answers", why)
            self._silent = True
            return Machine(False, "", f"{why}, so a machine without a GPU is assumed")
        return self._machine_of(runtime)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
