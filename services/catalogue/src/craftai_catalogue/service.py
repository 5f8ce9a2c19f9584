"""The catalogue's gRPC servicer: recipe data, engine advice and route states."""

from __future__ import annotations

from typing import Any

import grpc

from craftai_catalogue import advice, recipes, states
from craftai_catalogue.infer_peer import InferPeer
from craftai_catalogue.settings import CatalogueSettings
from craftai_common.errors import handle_errors
from craftai_common.peers import Peers
from craftai_common.server import Mount
from craftai_common.store import Store
from craftai_wire.v1 import catalogue_pb2, catalogue_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = catalogue_pb2.DESCRIPTOR.services_by_name["CatalogueService"].full_name


class CatalogueServicer(catalogue_pb2_grpc.CatalogueServiceServicer):
    def __init__(self, data: recipes.CatalogueData, store: Store, infer: InferPeer) -> None:
        self.data = data
        self.store = store
        self.infer = infer

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
        """Advice for the machine the caller names; without one, for the machine the infer service
        reports (no GPU assumed, and said, when it does not answer)."""
        route = request.route
        if request.HasField("machine"):
            gpu, source = request.machine.gpu_available, ""
        else:
            self._known(route.feature)  # an unknown feature is answered without asking infer
            machine = await self.infer.machine()
            gpu, source = machine.gpu_available, machine.source
        chosen = advice.resolve(self.data, route.feature, route.recipe, route.engine, gpu=gpu)
        return catalogue_pb2.ResolveRouteResponse(
            route=type(route)(feature=route.feature, recipe=chosen.recipe.name, engine=chosen.route.engine),
            recipe=recipes.recipe_to_proto(chosen.recipe, engine=chosen.route.engine),
            chosen=recipes.route_to_proto(chosen.recipe, chosen.route),
            reason=f"{chosen.reason}; {source}" if source else chosen.reason,
            checked_against=[recipes.file_to_proto(f) for f in chosen.recipe.checked_against(chosen.route.engine)],
        )

    @handle_errors
    async def GetRouteStates(
        self, request: catalogue_pb2.GetRouteStatesRequest, context: Context
    ) -> catalogue_pb2.GetRouteStatesResponse:
        if request.feature:
            self._known(request.feature)
        loaded = await self.infer.loaded_routes()
        return catalogue_pb2.GetRouteStatesResponse(
            routes=states.route_states(self.data, self.store, loaded, request.feature, request.recipe)
        )

    def _known(self, feature: str) -> None:
        """Raise the plain UNKNOWN_FEATURE error (listing the features) for a feature not in the data."""
        if self.data.feature(feature) is None:
            advice.resolve(self.data, feature, gpu=False)

    async def close(self) -> None:
        await self.infer.close()


def build(settings: CatalogueSettings, *, embedded: bool = False) -> Mount:
    """Load and validate the recipe data (a broken file stops the service here).

    Embedded (`craftai serve`), the infer service is on this same server: ask it there.
    """
    data = recipes.load(settings.recipes)
    infer = InferPeer(
        settings.infer_address,
        Peers(settings),
        timeout=settings.infer_timeout,
        machine_ttl=settings.machine_cache_seconds,
    )
    servicer = CatalogueServicer(data, Store(settings.store), infer)

    async def start(address: str) -> None:
        if embedded:
            infer.address = address

    return Mount(
        name=SERVICE_NAME,
        register=lambda server: catalogue_pb2_grpc.add_CatalogueServiceServicer_to_server(servicer, server),
        start=start,
        stop=servicer.close,
    )
