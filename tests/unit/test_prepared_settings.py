"""A prepared folder belongs to the recipe's settings of its files, not only to their bytes: the
prepare step and the catalogue's route state both tell a folder made with other settings (BiRefNet's
patch order, the torch route prepared without its ONNX, in process on a store of its own)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from craftai_catalogue import recipes, states
from craftai_common.store import FilePin, Store, read_manifest
from craftai_dev.birefnet_fixture import checkpoints
from craftai_models.birefnet import PREPARED_SETTINGS, PatchOrder, read_patch_order
from craftai_prepare.conversion import ensure_prepared
from craftai_prepare.reporter import Reporter
from craftai_wire.v1 import catalogue_pb2, common_pb2, prepare_pb2

pytestmark = pytest.mark.slow  # reads the 178 MB checkpoint strictly, twice
RECIPE = "birefnet-lite"


def _recipe(order: PatchOrder, weights: FilePin) -> recipes.RecipeSpec:
    spec = recipes.load().recipe("image.matte", RECIPE)
    assert spec is not None
    files = [
        f.model_copy(update={"size": weights.size, "sha256": weights.sha256, "settings": {"patch_order": order.value}})
        if f.role == "weights"
        else f
        for f in spec.files
    ]
    return spec.model_copy(update={"files": files})


def _resolved(spec: recipes.RecipeSpec) -> catalogue_pb2.ResolveRouteResponse:
    route = spec.route("torch")
    assert route is not None
    return catalogue_pb2.ResolveRouteResponse(
        route=common_pb2.RouteRef(feature="image.matte", recipe=RECIPE, engine="torch"),
        recipe=recipes.recipe_to_proto(spec, engine="torch"),
        chosen=recipes.route_to_proto(spec, route),
        checked_against=[recipes.file_to_proto(f) for f in spec.checked_against("torch")],
    )


def test_a_folder_made_with_other_settings_is_prepared_again_and_said_to_need_it(tmp_path: Path) -> None:
    made = checkpoints()["random"]
    store = Store(tmp_path / "store")
    store.ensure()
    path = store.model_path(made.pin)
    path.parent.mkdir(parents=True)
    os.link(made.path, path)
    store.write_record(made.pin)
    events: list[prepare_pb2.SetupEvent] = []
    reporter = Reporter(events.append)

    first = _recipe(PatchOrder.PATCH_MAJOR, made.pin)
    key = ensure_prepared(store, _resolved(first), reporter)
    assert key is not None
    folder = store.prepared_dir(RECIPE, key)
    assert read_patch_order(folder / PREPARED_SETTINGS) is PatchOrder.PATCH_MAJOR
    manifest = read_manifest(folder)
    assert manifest is not None and manifest.settings == {"model.safetensors": {"patch_order": "patch-major"}}
    assert manifest.unverified and manifest.checked_against == {}
    route = first.route("torch")
    assert route is not None
    status = states.route_status(store, first, route, None)
    assert status.state == catalogue_pb2.ROUTE_STATE_PREPARED and "not proven on the file" in status.detail
    assert ensure_prepared(store, _resolved(first), reporter) is None  # the same settings: only checked

    other = _recipe(PatchOrder.CHANNEL_MAJOR, made.pin)
    status = states.route_status(store, other, route, None)
    assert status.state == catalogue_pb2.ROUTE_STATE_DOWNLOADED
    assert "prepared with other settings" in status.detail and "craftai setup image.matte" in status.detail
    events.clear()
    assert ensure_prepared(store, _resolved(other), reporter) == key
    assert any("made with other settings" in e.notice.message for e in events if e.HasField("notice"))
    assert read_patch_order(folder / PREPARED_SETTINGS) is PatchOrder.CHANNEL_MAJOR
    assert states.route_status(store, other, route, None).state == catalogue_pb2.ROUTE_STATE_PREPARED
