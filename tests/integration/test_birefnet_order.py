"""BiRefNet_lite's patch order, a setting of the recipe's weights, proven on the file when the torch
route is prepared, through the services: the calibrated random checkpoint and its network exported
with the published contract at 512² (the proof's cost is a quarter of 1024²'s; the recipe's weights
say that side, as BiRefNet_HR's say 2048), in the order the
recipe gives (the checkpoint reproduces it: proven) or in the other one (the checkpoint reproduces
it only read in that order: refused in plain words, nothing served). Without the ONNX on disk the
route is prepared with the recipe's order and says it is unverified, with what to run; the next
setup that finds the ONNX prepares it again to prove it. Cost: two proofs at 512² (the checkpoint
in both orders and the graph, on the CPU), about half a minute each on two cores.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, Notice, RouteState, RouteStatus, SetupOutput
from craftai_common.store import prepared_key
from craftai_dev import catalogues, servers
from craftai_dev.birefnet_fixture import Checkpoint, checkpoints, onnx_file
from craftai_models.birefnet import PatchOrder
from craftai_prepare.converters import birefnet

pytestmark = pytest.mark.slow
RECIPE = "birefnet-lite"
WEIGHTS = "model.safetensors"
NETWORK = "BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx"
SIDE = 512
SETUP = "craftai setup image.matte --recipe birefnet-lite --engine"


@contextmanager
def _services(root: Path, weights: Checkpoint, network: Checkpoint) -> Iterator[tuple[AiClient, Path]]:
    """The services on a fresh store, the recipe's two files pinned to these and served on loopback."""
    (root / "files").mkdir(parents=True)
    (root / "files" / WEIGHTS).symlink_to(weights.path)
    (root / "files" / NETWORK).symlink_to(network.path)
    with servers.FileServer(root / "files") as files:
        data = catalogues.real_data()
        (pinned,) = [f for f in catalogues.recipe(data, RECIPE)["files"] if f["role"] == "weights"]
        at_512 = {**pinned["settings"], "input_side": str(SIDE)}  # the graph is at 512²: the recipe gives that side
        made = {"weights": weights.path, "network": network.path}
        catalogues.pin_files(data, RECIPE, made, files.url, {"weights": at_512})
        recipes = catalogues.write(root / "recipes.toml", data)
        process = servers.embedded(root / "store", root, {"CRAFTAI_RECIPES": str(recipes)})
        with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
            yield ai, root / "store"


def _torch(ai: AiClient) -> RouteStatus:
    return next(s for s in ai.status("image.matte", RECIPE) if s.route.engine == "torch")


def _notices(events: Sequence[object], code: str) -> list[str]:
    return [e.message for e in events if isinstance(e, Notice) and e.code == code]


def _tiny_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def _manifest(store: Path, weights: Checkpoint) -> dict[str, object]:
    key = prepared_key(birefnet.REVISION, [weights.pin])
    loaded: dict[str, object] = json.loads((store / "prepared" / RECIPE / key / "manifest.json").read_text())
    return loaded


def test_the_recipes_order_is_unverified_without_the_onnx_then_proven_on_the_file(tmp_path: Path) -> None:
    weights, network = checkpoints()["random"], onnx_file(SIDE, PatchOrder.PATCH_MAJOR)
    with _services(tmp_path, weights, network) as (ai, store):
        events = list(ai.setup("image.matte", RECIPE, "torch"))
        assert isinstance(events[-1], SetupOutput) and events[-1].prepared_now
        (said,) = _notices(events, "PREPARED_UNVERIFIED")
        assert "its patch order (patch-major) is the recipe's, not proven on the file" in said
        assert f"{NETWORK} was not on disk" in said and f"{SETUP} onnxruntime" in said, said
        status = _torch(ai)
        assert status.state == RouteState.PREPARED
        assert "not proven on the file" in status.detail, status.detail
        assert f"{NETWORK} was not on disk when it was prepared" in status.detail
        assert f"run {SETUP} onnxruntime, then {SETUP} torch" in status.detail, status.detail
        unproven = _manifest(store, weights)
        assert unproven["checked_against"] == {} and unproven["unverified"]
        assert json.loads((store / "prepared" / RECIPE / str(unproven["key"]) / "birefnet.json").read_text()) == {
            "patch_order": "patch-major",
            "architecture": "lite",
            "input_side": SIDE,
            "floats": "float32",
        }

        list(ai.setup("image.matte", RECIPE, "onnxruntime"))
        assert f"{NETWORK} is on disk now: run {SETUP} torch to check it" in _torch(ai).detail

        events = list(ai.setup("image.matte", RECIPE, "torch"))
        assert isinstance(events[-1], SetupOutput) and events[-1].prepared_now
        assert any(f"{NETWORK} is on disk now" in m for m in _notices(events, "PREPARED_REFUSED"))
        assert not _notices(events, "PREPARED_UNVERIFIED")
        proven = _manifest(store, weights)
        assert proven["checked_against"] == {NETWORK: network.pin.sha256} and proven["unverified"] == ""
        distance = proven["verification"]
        assert isinstance(distance, dict)
        print(f"\ndistance from the graph: {distance}")
        assert distance["logits_rdiff_patch_major"] <= birefnet.LOGIT_RTOL
        assert distance["logits_rdiff_channel_major"] >= birefnet.SEPARATION * distance["logits_rdiff_patch_major"]
        assert _torch(ai).detail == "on disk and verified; loads on first use"
        again = list(ai.setup("image.matte", RECIPE, "torch"))[-1]
        assert isinstance(again, SetupOutput) and not again.prepared_now  # proven once, then only checked


def test_a_checkpoint_trained_in_the_other_order_is_refused_and_not_served(tmp_path: Path) -> None:
    """The graph reads the patches channel-major: to the checkpoint it is the published ONNX of a
    checkpoint trained that way, so the recipe's patch-major is wrong for it. Prepared first without
    the ONNX (unverified, served), then the ONNX set up: the next setup proves the other order,
    refuses, and takes the unproven folder away."""
    weights, network = checkpoints()["random"], onnx_file(SIDE, PatchOrder.CHANNEL_MAJOR)
    with _services(tmp_path, weights, network) as (ai, store):
        list(ai.setup("image.matte", RECIPE, "torch"))
        assert _torch(ai).state == RouteState.PREPARED
        list(ai.setup("image.matte", RECIPE, "onnxruntime"))
        with pytest.raises(CraftAiError) as caught:
            list(ai.setup("image.matte", RECIPE, "torch"))
        message = caught.value.message
        assert caught.value.reason == "PREPARATION_FAILED", message
        assert (
            "the checkpoint reproduces the published ONNX only when it reads the picture's patches in the "
            "channel-major order, not in the patch-major order the recipe gives for it"
        ) in message
        assert 'the recipe data\'s patch_order for this file must be "channel-major"' in message
        assert _torch(ai).state == RouteState.DOWNLOADED
        assert not list((store / "prepared" / RECIPE).iterdir())
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(_tiny_png(), outputs="matte", recipe=RECIPE, engine="torch")
        assert caught.value.reason == "ROUTE_NOT_SET_UP"
