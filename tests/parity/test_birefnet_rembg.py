"""rembg's BiRefNet models (birefnet-general, -portrait, -dis, -hrsod, -cod, -massive) through the
services: each recipe set up by the prepare service from a loopback source under its pin, and its
mattes byte for byte those of rembg's own session of that model on the same file, each on two
pictures (one over 2000 px among them) but birefnet-general, on one. bria-rmbg, listed but not
offered, is refused at setup; its route, run on its own, answers rembg's matte too and gives its
working memory back.

None of the files can be downloaded here: each recipe is pinned to a stand-in of its own with the
published contract (craftai_dev.birefnet_rembg_fixture): the calibrated BiRefNet_lite graph for
birefnet-general and bria-rmbg, small graphs of the contract for the five others (the same route
class and steps as birefnet-general's)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError
from craftai_dev import birefnet_rembg_fixture, rembg_peer, servers, stand_ins
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.birefnet_rembg_onnx import BriaRembgOnnx

pytestmark = pytest.mark.slow
OFFERED = [name for name in birefnet_rembg_fixture.VARIANTS if name != "bria-rmbg"]
# recipe -> the pictures its matte is compared on (the network stand-in takes ~10 s a picture on two
# cores, each side; the small contract graphs of the others well under one). The network's stand-in
# runs on one picture: its route class and steps are the others', which show them on both kinds of
# picture, the large one on two of them; what it adds is the network's graph answering as rembg's.
PICTURES = {
    "birefnet-general": ["astronaut.png"],
    "birefnet-portrait": ["astronaut.png", "chelsea.png"],
    "birefnet-dis": ["coffee.png", "rocket.jpg"],
    "birefnet-hrsod": ["rocket.jpg", "large.jpg"],
    "birefnet-cod": ["chelsea.png", "coffee.png"],
    "birefnet-massive": ["coffee.png", "astronaut.png"],
}


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return birefnet_rembg_fixture.onnx_files()


@pytest.fixture(scope="module")
def pictures(photos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four sample photos and a 2400x1600 JPEG (over 2000 px)."""
    return stand_ins.with_a_large_picture(
        photos, tmp_path_factory.mktemp("birefnet-pictures"), "coffee.png", (2400, 1600)
    )


@pytest.fixture(scope="module")
def server(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with every recipe pinned to its stand-in, the offered ones set up on
    onnxruntime from a loopback HTTP server by the prepare service."""
    with stand_ins.serving(files, tmp_path_factory.mktemp("birefnet-rembg"), OFFERED) as process:
        yield process


@pytest.mark.parametrize("recipe", OFFERED)
def test_the_recipes_mattes_are_rembgs_byte_for_byte(
    recipe: str,
    server: servers.Process,
    files: dict[str, Path],
    pictures: dict[str, Path],
    rembg_answers: rembg_peer.Answers,
    tmp_path: Path,
) -> None:
    """rembg's answers kept for the run: birefnet-general's torch route is compared with the same
    (tests/parity/test_birefnet_rembg_torch.py)."""
    chosen = {name: pictures[name] for name in PICTURES[recipe]}
    theirs = rembg_answers.mattes(recipe, files[recipe], chosen, tmp_path)
    stand_ins.assert_rembgs_mattes(server.address, recipe, theirs, chosen, min_share=0.02)


def test_bria_is_listed_with_its_licence_and_refused_at_setup(server: servers.Process) -> None:
    with AiClient(app_id="tests", target=server.address) as ai:
        (bria,) = [r for f in ai.features() for r in f.recipes if r.name == "bria-rmbg"]
        assert not bria.available and "non-commercial" in bria.unavailable_reason, bria
        assert "CC BY-NC 4.0" in bria.license
        with pytest.raises(CraftAiError, match="non-commercial"):
            list(ai.setup("image.matte", "bria-rmbg"))


def _resident() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_brias_route_answers_rembgs_matte_and_gives_its_working_memory_back(
    files: dict[str, Path], pictures: dict[str, Path], tmp_path: Path
) -> None:
    """Its steps differ (no sigmoid: BRIA's graph applies it); the route runs on its own, on the CPU.
    The network's working memory (counted per request by `working_bytes`, ~1.5 GB here) is not kept
    resident once the picture is answered."""
    chosen = {"rocket.jpg": pictures["rocket.jpg"]}
    theirs = rembg_peer.mattes("bria-rmbg", files["bria-rmbg"], chosen, tmp_path)
    route = BriaRembgOnnx(RouteFiles(by_role={"network": files["bria-rmbg"]}, prepared=None, cpu_threads=2), "cpu")
    picture = np.asarray(Image.open(chosen["rocket.jpg"]).convert("RGB"))
    before = _resident()
    (ours,) = route.matte([picture])
    assert _resident() - before < 400 * 2**20, (before, _resident())
    assert np.array_equal(ours, theirs["rocket.jpg"]), int(np.abs(ours.astype(int) - theirs["rocket.jpg"]).max())
    share = float((ours > 127).mean())
    assert len(np.unique(ours)) >= 64 and 0.02 < share < 0.98, share
