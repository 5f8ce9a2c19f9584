"""rembg's IS-Net models (isnet-general-use, isnet-anime) through the services: each recipe set up by
the prepare service from a loopback source under its pin, and its mattes byte for byte those of
rembg's own session of that model on the same file, on the sample photos and on a picture over
2000 px.

Neither file can be downloaded here: each recipe is pinned to a stand-in of its own, its reference
network (the DIS authors' IS-Net; SkyTNT's anime variant) with random weights calibrated on the
photos, exported in the published file's form (craftai_dev.isnet_fixture)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient
from craftai_dev import catalogues, isnet_fixture, rembg_peer, servers
from craftai_dev.files import sha256_of

pytestmark = pytest.mark.slow
RECIPES = list(isnet_fixture.RECIPES)


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return isnet_fixture.onnx_files()


@pytest.fixture(scope="module")
def pictures(photos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four sample photos and a 1600x2400 JPEG (over 2000 px, portrait)."""
    large = tmp_path_factory.mktemp("isnet-pictures") / "large.jpg"
    Image.open(photos["astronaut.png"]).convert("RGB").resize((1600, 2400), Image.Resampling.LANCZOS).save(
        large, quality=90
    )
    return {**photos, "large.jpg": large}


@pytest.fixture(scope="module")
def server(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with both recipes pinned to their stand-ins, each set up on onnxruntime from a
    loopback HTTP server by the prepare service."""
    work = tmp_path_factory.mktemp("isnet")
    (work / "files").mkdir()
    for name, path in files.items():
        (work / "files" / name).mkdir()
        (work / "files" / name / f"{name}.onnx").symlink_to(path)
    with servers.FileServer(work / "files") as source:
        data = catalogues.real_data()
        for name, path in files.items():
            (pin,) = catalogues.recipe(data, name)["files"]
            pin.update(size=path.stat().st_size, sha256=sha256_of(path))
            pin["sources"] = [{"url": f"{source.url}/{name}/{name}.onnx"}]
        env = {"CRAFTAI_RECIPES": str(catalogues.write(work / "recipes.toml", data))}
        with servers.running(servers.embedded(work / "store", work, env)) as process:
            with AiClient(app_id="tests", target=process.address) as ai:
                for name in RECIPES:
                    events = list(ai.setup("image.matte", name))
                    assert events[-1].files[0].sha256 == sha256_of(files[name])  # type: ignore[union-attr]
            yield process


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipes_mattes_are_rembgs_byte_for_byte(
    recipe: str, server: servers.Process, files: dict[str, Path], pictures: dict[str, Path], tmp_path: Path
) -> None:
    theirs = rembg_peer.mattes(recipe, files[recipe], pictures, tmp_path)
    with AiClient(app_id="tests", target=server.address) as ai:
        for name, path in pictures.items():
            answer = ai.remove_background(path, outputs="matte", recipe=recipe)
            assert (answer.recipe, answer.engine) == (recipe, "onnxruntime")
            ours = np.asarray(Image.open(io.BytesIO(answer.matte_png)))
            assert ours.shape == theirs[name].shape, name
            assert np.array_equal(ours, theirs[name]), (
                recipe,
                name,
                int(np.abs(ours.astype(int) - theirs[name]).max()),
            )
            # not a trivial matte: many levels, subject and background both present
            assert len(np.unique(ours)) >= 64 and 0.05 < float((ours > 127).mean()) < 0.95, (recipe, name)
