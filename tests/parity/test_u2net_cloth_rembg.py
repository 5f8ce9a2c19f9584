"""rembg's u2net_cloth_seg through the services: the recipe set up by the prepare service from a
loopback source under its pin, and its mattes byte for byte those of rembg's own session on the
same file: the three parts stacked top to bottom (rembg's answer without `cc`) and each part alone
(`cc`), on the sample photos and on a picture over 2000 px.

The file cannot be downloaded here: the recipe is pinned to a stand-in, the authors' U²-Net with
four classes and random weights, calibrated so that every class wins somewhere on each picture
(craftai_dev.u2net_cloth_fixture). Its network takes seconds a picture at 768² on two cores, so
each picture is asked of the server once, in one of the four ways (the stacked answer of two, each
part of one), and rembg answers every way on every picture from one network run a picture
(craftai_dev.rembg_peer.mattes_with); that its stacked answer is its three parts one below the other
is checked too, so each way is rembg's on every picture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from craftai import AiClient
from craftai.errors import CraftAiError
from craftai_dev import rembg_peer, servers, stand_ins, u2net_cloth_fixture

pytestmark = pytest.mark.slow
RECIPE = u2net_cloth_fixture.RECIPE
PARTS = ("upper", "lower", "full")
# each picture's one request: None, the parts stacked; else the part asked
ASKED: dict[str, str | None] = {
    "astronaut.png": None,
    "large.jpg": None,
    "chelsea.png": "upper",
    "coffee.png": "lower",
    "rocket.jpg": "full",
}


@pytest.fixture(scope="module")
def file() -> Path:
    return u2net_cloth_fixture.onnx_file()


@pytest.fixture(scope="module")
def pictures(photos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four sample photos and a 2400x1600 JPEG (over 2000 px, another aspect)."""
    return stand_ins.with_a_large_picture(
        photos, tmp_path_factory.mktemp("cloth-pictures"), "chelsea.png", (2400, 1600)
    )


@pytest.fixture(scope="module")
def server(file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with the recipe pinned to the stand-in, set up on onnxruntime from a loopback
    HTTP server by the prepare service."""
    with stand_ins.serving({RECIPE: file}, tmp_path_factory.mktemp("cloth"), [RECIPE]) as process:
        yield process


@pytest.fixture(scope="module")
def theirs(
    file: Path, pictures: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str | None, dict[str, np.ndarray]]:
    """rembg's masks of every picture: by part asked (`cc`), None for its stacked answer (an RGBA
    picture of grey masks, made an 8-bit grey one here once checked to be one)."""
    work = tmp_path_factory.mktemp("cloth-rembg")
    stacked, *alone = rembg_peer.mattes_with(RECIPE, file, pictures, work, [{}, *({"cc": p} for p in PARTS)])
    for name, rgba in stacked.items():
        assert rgba.ndim == 3 and (rgba[..., 3] == 255).all(), name
        assert (rgba[..., :3] == rgba[..., :1]).all(), name
        stacked[name] = np.ascontiguousarray(rgba[..., 0])
    return {None: stacked, **dict(zip(PARTS, alone, strict=True))}


def test_rembgs_stacked_answer_is_its_three_parts_one_below_the_other_each_found_on_every_picture(
    theirs: dict[str | None, dict[str, np.ndarray]],
) -> None:
    for name, stacked in theirs[None].items():
        parts = [theirs[part][name] for part in PARTS]
        assert np.array_equal(stacked, np.concatenate(parts)), name
        for part, matte in zip(PARTS, parts, strict=True):
            assert set(np.unique(matte)) == {0, 255}, (name, part)  # the stand-in's class wins somewhere


@pytest.mark.parametrize("name", list(ASKED))
def test_the_mattes_are_rembgs_byte_for_byte(
    name: str, server: servers.Process, pictures: dict[str, Path], theirs: dict[str | None, dict[str, np.ndarray]]
) -> None:
    part = ASKED[name]
    stand_ins.assert_rembgs_mattes(
        server.address, RECIPE, theirs[part], {name: pictures[name]}, min_share=0.001, part=part, levels=2
    )


def test_a_part_asked_of_a_recipe_without_parts_is_refused_naming_the_recipes_with_parts(
    server: servers.Process, photos: dict[str, Path]
) -> None:
    with AiClient(app_id="tests", target=server.address) as ai, pytest.raises(CraftAiError) as refused:
        ai.remove_background(photos["coffee.png"], outputs="matte", recipe="u2netp", part="upper")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "u2netp has no parts" in str(refused.value) and RECIPE in str(refused.value)
