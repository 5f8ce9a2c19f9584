"""The state of each route on this installation, read from the store without touching model bytes.

Files count as verified through prepare's verification records (size and mtime unchanged); a
prepared folder counts when its manifest is in place (it is renamed into place complete).
"""

from __future__ import annotations

from pathlib import Path

from craftai_catalogue.recipes import CatalogueData, RecipeSpec, RouteSpec
from craftai_common.catalogue_client import check_hint, setup_command
from craftai_common.store import FilePin, Store, check_prepared, read_manifest
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
    unverified = ""
    if route.needs_preparation:
        key, folder = store.prepared_place(route.revision, pins)
        status.revision = key
        problem = check_prepared(folder, key, pins, deep=False)
        if problem is None:
            problem = _other_settings(recipe, route, folder)
        if problem is None:
            unverified = _unverified(store, recipe, route, folder, command)
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
    if unverified and status.state in (catalogue_pb2.ROUTE_STATE_PREPARED, catalogue_pb2.ROUTE_STATE_READY):
        status.detail += f"; {unverified}"
    return status


def _other_settings(recipe: RecipeSpec, route: RouteSpec, folder: Path) -> str | None:
    """Why a prepared folder no longer fits the recipe's settings of its files (None when it does)."""
    manifest = read_manifest(folder)
    wanted = {f.name: dict(f.settings) for f in recipe.files_of(route.engine) if f.settings}
    if manifest is None or manifest.settings == wanted:
        return None
    return f"it was prepared with other settings of its files ({manifest.settings}; the recipe's are {wanted})"


def _unverified(store: Store, recipe: RecipeSpec, route: RouteSpec, folder: Path, command: str) -> str:
    """What the route's preparation could not check, in plain words with what to run to check it
    (its manifest says; empty when it checked everything it is meant to)."""
    manifest = read_manifest(folder)
    if manifest is None or not manifest.unverified:
        return ""
    missing = [f for f in recipe.checked_against(route.engine) if f.name not in manifest.checked_against]
    here = [f for f in missing if store.check_by_record(FilePin(f.folder, f.name, f.size, f.sha256)).verified]
    if here:
        return f"{manifest.unverified} ({', '.join(f.name for f in here)} is on disk now: run {command} to check it)"
    if not missing:
        return manifest.unverified
    ref = common_pb2.RouteRef(feature=recipe.feature, recipe=recipe.name, engine=route.engine)
    hint = check_hint(ref, [f.name for f in missing], [e for f in missing for e in f.engines])
    return f"{manifest.unverified} ({hint})"


def route_states(
    data: CatalogueData, store: Store, loaded: set[RouteKey] | None, feature: str = "", recipe: str = ""
) -> list[catalogue_pb2.RouteStatus]:
    return [
        route_status(store, spec, route, loaded)
        for spec in data.recipes
        if (not feature or spec.feature == feature) and (not recipe or spec.name == recipe)
        for route in spec.routes
    ]
