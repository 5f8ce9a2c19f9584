"""rembg's IS-Net models (isnet-general-use, isnet-anime) through the services: each recipe set up by
the prepare service from a loopback source under its pin, and its mattes byte for byte those of
rembg's own session of that model on the same file, on the sample photos (isnet-anime: two of them)
and on a picture over 2000 px.

Neither file can be downloaded here: each recipe is pinned to a stand-in of its own, its reference
network (the DIS authors' IS-Net; SkyTNT's anime variant) with random weights calibrated on the
photos, exported in the published file's form (craftai_dev.isnet_fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from craftai_dev import isnet_fixture, rembg_peer, servers, stand_ins

pytestmark = pytest.mark.slow
RECIPES = list(isnet_fixture.RECIPES)
# isnet-anime on fewer pictures (its steps differ from the general model's by the mean alone; each
# picture takes ~5 s a side on two cores): two photos and the large one
PICTURES = {"isnet-anime": ["astronaut.png", "coffee.png", "large.jpg"]}


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return isnet_fixture.onnx_files()


@pytest.fixture(scope="module")
def pictures(photos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four sample photos and a 1600x2400 JPEG (over 2000 px, portrait)."""
    return stand_ins.with_a_large_picture(
        photos, tmp_path_factory.mktemp("isnet-pictures"), "astronaut.png", (1600, 2400)
    )


@pytest.fixture(scope="module")
def server(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with both recipes pinned to their stand-ins, each set up on onnxruntime from a
    loopback HTTP server by the prepare service."""
    with stand_ins.serving(files, tmp_path_factory.mktemp("isnet"), RECIPES) as process:
        yield process


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipes_mattes_are_rembgs_byte_for_byte(
    recipe: str,
    server: servers.Process,
    files: dict[str, Path],
    pictures: dict[str, Path],
    rembg_answers: rembg_peer.Answers,
    tmp_path: Path,
) -> None:
    """rembg's answers kept for the run: isnet-anime's torch route is compared with its matte of
    coffee.png (tests/parity/test_isnet_conversion.py)."""
    chosen = {name: pictures[name] for name in PICTURES[recipe]} if recipe in PICTURES else pictures
    theirs = rembg_answers.mattes(recipe, files[recipe], chosen, tmp_path)
    stand_ins.assert_rembgs_mattes(server.address, recipe, theirs, chosen, min_share=0.05)
