"""How prepare and infer ask the catalogue which route and files a request needs."""

from __future__ import annotations

import grpc
from grpc_status import rpc_status

from craftai_common.auth import INTERNAL_APP_ID
from craftai_common.errors import ServiceError
from craftai_common.peers import Peers
from craftai_common.store import FilePin
from craftai_wire.details import unpack
from craftai_wire.v1 import catalogue_pb2, catalogue_pb2_grpc, common_pb2
from craftai_wire.vocabulary import Reason

__all__ = ["INTERNAL_APP_ID", "CatalogueClient", "error_from_rpc", "pins_of", "setup_command"]

# Set when a resolution went to the catalogue (not answered from a cache); read by the infer
# service's cache metrics. A context variable: exact per request, however many run at once.


class CatalogueClient:
    """A lazily opened channel to the catalogue; owned (and closed) by the service using it."""

    def __init__(self, address: str = "", *, peers: Peers | None = None, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self.peers = peers
        self._channel: grpc.aio.Channel | None = None
        self._stub: catalogue_pb2_grpc.CatalogueServiceAsyncStub | None = None

    def _get_stub(self) -> catalogue_pb2_grpc.CatalogueServiceAsyncStub:
        if self._stub is None:
            if not self.address:
                raise ServiceError(
                    grpc.StatusCode.UNAVAILABLE, Reason.CATALOGUE_UNREACHABLE, "no catalogue address is configured"
                )
            self._channel = self.peers.channel(self.address) if self.peers else grpc.aio.insecure_channel(self.address)
            self._stub = catalogue_pb2_grpc.CatalogueServiceStub(self._channel)
        return self._stub

    async def resolve(
        self, route: common_pb2.RouteRef, *, gpu_available: bool | None
    ) -> catalogue_pb2.ResolveRouteResponse:
        """The catalogue's advice for this machine; `gpu_available` None: for the infer service's
        machine, which the catalogue asks itself."""
        machine = None if gpu_available is None else catalogue_pb2.MachineInfo(gpu_available=gpu_available)
        request = catalogue_pb2.ResolveRouteRequest(route=route, machine=machine)
        try:
            return await self._get_stub().ResolveRoute(request, timeout=self.timeout, metadata=Peers.metadata())
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"the catalogue at {self.address}") from exc

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None


def error_from_rpc(exc: grpc.aio.AioRpcError, who: str) -> ServiceError:
    """Carry another service's answer on unchanged (code, reason and message)."""
    status = rpc_status.from_call(exc)
    reason: str = Reason.CATALOGUE_UNREACHABLE if exc.code() == grpc.StatusCode.UNAVAILABLE else Reason.INTERNAL
    metadata: dict[str, str] = {}
    if status is not None:
        details = unpack(status)
        if details.reason:
            reason, metadata = details.reason, details.metadata
    message = exc.details() or ""
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and status is None:
        message = f"{who} did not answer ({exc.code().name}): {message}"
    return ServiceError(
        exc.code(), Reason(reason) if reason in Reason.__members__ else Reason.INTERNAL, message, metadata=metadata
    )


def setup_command(route: common_pb2.RouteRef, *, several_engines: bool) -> str:
    """The command that sets a route up, as every message that asks for it names it (the engine
    only where the recipe has several)."""
    engine = f" --engine {route.engine}" if several_engines else ""
    return f"craftai setup {route.feature} --recipe {route.recipe}{engine}"


def check_hint(ref: common_pb2.RouteRef, names: list[str], engines: list[str]) -> str:
    """What to run so that a route's preparation can check itself against files of the recipe's
    other routes that were not on disk (`names`, used by those `engines`)."""
    first = [
        setup_command(common_pb2.RouteRef(feature=ref.feature, recipe=ref.recipe, engine=e), several_engines=True)
        for e in sorted(set(engines))
    ]
    again = setup_command(ref, several_engines=True)
    return (
        f"{', '.join(names)} was not on disk when it was prepared; to check it, run {' and '.join(first)}, then {again}"
    )


def pins_of(recipe: catalogue_pb2.Recipe) -> list[FilePin]:
    return [FilePin(f.folder, f.name, f.size, f.sha256) for f in recipe.files]
