"""The state of each route on this installation, read from the store without touching model bytes.

Files count as verified through prepare's verification records (size and mtime unchanged); a
prepared folder counts when its manifest is in place (it is renamed into place complete).
"""

from __future__ import annotations

from craftai_catalogue.recipes import CatalogueData, RecipeSpec, RouteSpec
from craftai_common.catalogue_client import setup_command
from craftai_common.store import FilePin, Store, check_prepared
from craftai_wire.v1 import catalogue_pb2, common_pb2

RouteKey = tuple[str, str, str]  # feature, recipe, engine


def route_status(
    store: Store, recipe: RecipeSpec, route: RouteSpec, loaded: set[RouteKey] | None
) -> catalogue_pb2.RouteStatus:
    ref = common_pb2.RouteRef(feature=recipe.feature, recipe=recipe.name, engine=route.engine)
    status = catalogue_pb2.RouteStatus(route=ref, needs_preparation=route.needs_preparation, revision=route.revision)
    if not recipe.available:
        status.state = catalogue_pb2.ROUTE_STATE_UNAVAILABLE
        status.detail = recipe.unavailable_reason
        return status
    all_verified = True
    files = recipe.files_of(route.engine)
    pins = [FilePin(spec.folder, spec.name, spec.size, spec.sha256) for spec in files]
    for spec, pin in zip(files, pins, strict=True):
        check = store.check_by_record(pin)
        status.files.append(
            catalogue_pb2.FileState(
                folder=spec.folder,
                name=spec.name,
                present=check.present,
                verified=check.verified,
                size=check.size,
                detail=check.detail,
            )
        )
        all_verified &= check.verified
    command = setup_command(ref, several_engines=len(recipe.routes) > 1)
    problem = None
    if route.needs_preparation:
        key, folder = store.prepared_place(route.revision, pins)
        status.revision = key
        problem = check_prepared(folder, key, pins, deep=False)
    if not all_verified:
        status.state = catalogue_pb2.ROUTE_STATE_MISSING
        status.detail = f"files missing or not verified; set it up with: {command}"
    elif problem is not None:
        status.state = catalogue_pb2.ROUTE_STATE_DOWNLOADED
        status.detail = f"downloaded and verified; needs its one-time preparation ({problem}): {command}"
    elif loaded is not None and (recipe.feature, recipe.name, route.engine) in loaded:
        status.state = catalogue_pb2.ROUTE_STATE_READY
        status.detail = "loaded and warm in the infer service"
    else:
        status.state = catalogue_pb2.ROUTE_STATE_PREPARED
        status.detail = "on disk and verified; loads on first use"
    return status


def route_states(
    data: CatalogueData, store: Store, loaded: set[RouteKey] | None, feature: str = "", recipe: str = ""
) -> list[catalogue_pb2.RouteStatus]:
    return [
        route_status(store, spec, route, loaded)
        for spec in data.recipes
        if (not feature or spec.feature == feature) and (not recipe or spec.name == recipe)
        for route in spec.routes
    ]
