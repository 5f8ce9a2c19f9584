"""The catalogue's gRPC servicer: recipe data, engine advice and route states."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from craftai_catalogue import advice, recipes, states
from craftai_catalogue.settings import CatalogueSettings
from craftai_common.errors import handle_errors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store
from craftai_wire.v1 import catalogue_pb2, catalogue_pb2_grpc, infer_pb2, infer_pb2_grpc

log = logging.getLogger("craftai.catalogue")
Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = catalogue_pb2.DESCRIPTOR.services_by_name["CatalogueService"].full_name


class CatalogueServicer(catalogue_pb2_grpc.CatalogueServiceServicer):
    def __init__(
        self, data: recipes.CatalogueData, store: Store, infer_address: str = "", peers: Peers | None = None
    ) -> None:
        self.data = data
        self.store = store
        self.infer_address = infer_address
        self.peers = peers
        self._infer_channel: grpc.aio.Channel | None = None

    @handle_errors
    async def ListFeatures(
        self, request: catalogue_pb2.ListFeaturesRequest, context: Context
    ) -> catalogue_pb2.ListFeaturesResponse:
        return catalogue_pb2.ListFeaturesResponse(
            features=[recipes.feature_to_proto(self.data, f) for f in self.data.features],
            catalogue_revision=self.data.revision,
        )

    @handle_errors
    async def ResolveRoute(
        self, request: catalogue_pb2.ResolveRouteRequest, context: Context
    ) -> catalogue_pb2.ResolveRouteResponse:
        route = request.route
        chosen = advice.resolve(self.data, route.feature, route.recipe, route.engine, gpu=request.machine.gpu_available)
        return catalogue_pb2.ResolveRouteResponse(
            route=type(route)(feature=route.feature, recipe=chosen.recipe.name, engine=chosen.route.engine),
            recipe=recipes.recipe_to_proto(chosen.recipe),
            chosen=recipes.route_to_proto(chosen.route),
            reason=chosen.reason,
        )

    @handle_errors
    async def GetRouteStates(
        self, request: catalogue_pb2.GetRouteStatesRequest, context: Context
    ) -> catalogue_pb2.GetRouteStatesResponse:
        if request.feature and self.data.feature(request.feature) is None:
            advice.resolve(self.data, request.feature, gpu=False)  # raises the plain UNKNOWN_FEATURE error
        loaded = await self._loaded_routes()
        return catalogue_pb2.GetRouteStatesResponse(
            routes=states.route_states(self.data, self.store, loaded, request.feature, request.recipe)
        )

    async def _loaded_routes(self) -> set[states.RouteKey] | None:
        """Ask the infer service which routes are warm; None when it is not configured or silent."""
        if not self.infer_address:
            return None
        if self._infer_channel is None:
            self._infer_channel = (
                self.peers.channel(self.infer_address) if self.peers else grpc.aio.insecure_channel(self.infer_address)
            )
        stub = infer_pb2_grpc.InferServiceStub(self._infer_channel)
        try:
            runtime = await stub.GetRuntime(infer_pb2.GetRuntimeRequest(), timeout=2.0, metadata=Peers.metadata())
        except grpc.aio.AioRpcError as exc:
            log.info("infer service at %s did not answer (%s)", self.infer_address, exc.code().name)
            return None
        return {(r.route.feature, r.route.recipe, r.route.engine) for r in runtime.loaded}

    async def close(self) -> None:
        if self._infer_channel is not None:
            await self._infer_channel.close()
            self._infer_channel = None


def build(settings: CatalogueSettings, *, embedded: bool = False) -> Mount:
    """Load and validate the recipe data (a broken file stops the service here).

    Embedded (`craftai serve`), the infer service is on this same server: ask it there.
    """
    data = recipes.load(settings.recipes)
    servicer = CatalogueServicer(data, Store(settings.store), settings.infer_address, Peers(settings))

    async def start(address: str) -> None:
        if embedded:
            servicer.infer_address = address

    return Mount(
        name=SERVICE_NAME,
        register=lambda server: catalogue_pb2_grpc.add_CatalogueServiceServicer_to_server(servicer, server),
        start=start,
        stop=servicer.close,
    )
