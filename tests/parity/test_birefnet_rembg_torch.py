"""rembg's Swin-L BiRefNet recipes on torch (birefnet-general, birefnet-portrait), through the
services: the torch route prepared by the prepare service from the author's checkpoint, then its
mattes against rembg's own session of the recipe's ONNX on two pictures.

Neither the Swin-L checkpoints (0.4 and 0.9 GB) nor rembg's graphs (0.97 GB) can be downloaded here,
and a Swin-L network takes about half a minute a picture on two cores: birefnet-general is pinned to
the calibrated BiRefNet_lite checkpoint (craftai_dev.birefnet_fixture), its weights' settings naming
that configuration, and to that checkpoint's own export with rembg's contract (its stand-in in
craftai_dev.birefnet_rembg_fixture). The route reads the configuration from the prepared folder and
runs the same steps around either network; the Swin-L network itself is checked against nobg's in
tests/unit/test_birefnet_swin_l.py and on the GPU."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient
from craftai_dev import birefnet_fixture, birefnet_rembg_fixture, catalogues, rembg_peer, servers
from craftai_dev.masks import NEAR_MATTE_MAX_DIFF
from craftai_models.birefnet import TRAINED_ORDER, Architecture

pytestmark = pytest.mark.slow
PICTURES = ["astronaut.png", "chelsea.png"]
RECIPE = "birefnet-general"


@contextmanager
def _services(root: Path, recipes: list[str]) -> Iterator[AiClient]:
    """The services on a fresh store; each recipe's ONNX pinned to its stand-in and its weights to
    the calibrated lite checkpoint, all served on loopback."""
    checkpoint = birefnet_fixture.checkpoints()["random"]
    graphs = birefnet_rembg_fixture.onnx_files()
    (root / "files").mkdir(parents=True)
    with servers.FileServer(root / "files") as source:
        data = catalogues.real_data()
        lite = {"patch_order": TRAINED_ORDER.value, "architecture": Architecture.LITE.value}
        for name in recipes:
            made = {"weights": checkpoint.path, "network": graphs[name]}
            (root / "files" / name).mkdir()
            for pinned in catalogues.recipe(data, name)["files"]:
                (root / "files" / name / pinned["name"]).symlink_to(made[pinned["role"]])
            catalogues.pin_files(data, name, made, f"{source.url}/{name}", {"weights": lite})
        recipes_file = catalogues.write(root / "recipes.toml", data)
        process = servers.embedded(root / "store", root, {"CRAFTAI_RECIPES": str(recipes_file)})
        with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
            yield ai


def test_the_torch_route_answers_rembgs_matte(
    photos: dict[str, Path], rembg_answers: rembg_peer.Answers, tmp_path: Path
) -> None:
    """The torch route set up alone (the graph not on the server's disk, so prepared unproven: the
    proof is the same converter's as birefnet-lite's, run through the services on this checkpoint
    and its export in tests/integration/test_birefnet_order.py, its decision on each outcome in
    tests/unit/test_birefnet_proof_rule.py; here it would cost three more 1024² forwards on a CI
    worker's one thread), then its mattes against rembg's session of the graph (its answers kept for
    the run: tests/parity/test_birefnet_rembg.py compares the onnxruntime route with them)."""
    recipe = RECIPE
    chosen = {name: photos[name] for name in PICTURES}
    theirs = rembg_answers.mattes(recipe, birefnet_rembg_fixture.onnx_files()[recipe], chosen, tmp_path / "rembg")
    with _services(tmp_path / "services", [recipe]) as ai:
        list(ai.setup("image.matte", recipe, "torch"))
        (status,) = [s for s in ai.status("image.matte", recipe) if s.route.engine == "torch"]
        assert "the published ONNX it is checked against was not on disk" in status.detail, status.detail
        for name, path in chosen.items():
            answer = ai.remove_background(path, outputs="matte", recipe=recipe, engine="torch")
            assert (answer.recipe, answer.engine) == (recipe, "torch")
            ours = np.asarray(Image.open(io.BytesIO(answer.matte_png)))
            assert ours.shape == theirs[name].shape, name
            difference = np.abs(ours.astype(int) - theirs[name])
            print(f"\n{name}: max |Δ| {difference.max()}, {float((difference > 0).mean()):.4%} of pixels differ")
            assert int(difference.max()) <= NEAR_MATTE_MAX_DIFF, name
            assert len(np.unique(ours)) >= 64 and 0.02 < float((ours > 127).mean()) < 0.98, name
