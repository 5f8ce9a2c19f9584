"""InSPyReNet through the services with a randomised checkpoint pinned by a test catalogue:
setup, load, matte at the picture's size; crafted and wrong files refused in plain words."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from PIL import Image

from craftai import AiClient, CraftAiError
from craftai_dev import catalogues, servers
from craftai_dev.inspyrenet_fixture import Checkpoint, checkpoints
from craftai_infer.pipelines import matte_outputs
from craftai_infer.pipelines.matte_spec import Blur

pytestmark = pytest.mark.slow
STORE_FILE = Path("models/inspyrenet-swinb/inspyrenet.safetensors")


@pytest.fixture(scope="module")
def made() -> dict[str, Checkpoint]:
    return checkpoints()


def _catalogue(path: Path, checkpoint: Checkpoint, url: str) -> Path:
    data = catalogues.real_data()
    (pinned,) = catalogues.recipe(data, "inspyrenet-swinb")["files"]
    pinned.update(size=checkpoint.pin.size, sha256=checkpoint.pin.sha256, sources=[{"url": url}])
    return catalogues.write(path, data)


@pytest.fixture(scope="module")
def inspyrenet_server(
    made: dict[str, Checkpoint], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[servers.Process, servers.FileServer]]:
    root = tmp_path_factory.mktemp("inspyrenet")
    (root / "files").mkdir()
    shutil.copyfile(made["random"].path, root / "files" / "inspyrenet.safetensors")
    shutil.copyfile(made["missing-key"].path, root / "files" / "other.safetensors")
    with servers.FileServer(root / "files") as files:
        recipes = _catalogue(root / "recipes.toml", made["random"], f"{files.url}/inspyrenet.safetensors")
        process = servers.embedded(root / "store", root, {"CRAFTAI_RECIPES": str(recipes)})
        with servers.running(process):
            yield process, files


def test_setup_load_and_matte_at_the_pictures_size(
    inspyrenet_server: tuple[servers.Process, servers.FileServer], photos: dict[str, Path]
) -> None:
    process, _ = inspyrenet_server
    with AiClient(app_id="tests", target=process.address) as ai:
        result = list(ai.setup("image.matte", "inspyrenet-swinb"))[-1]
        assert result.files[0].downloaded  # type: ignore[union-attr]
        picture = Image.open(photos["chelsea.png"]).resize((61, 41))
        out = io.BytesIO()
        picture.save(out, format="PNG")
        matte = ai.remove_background(out.getvalue(), outputs="matte,cutout", recipe="inspyrenet-swinb")
        assert (matte.recipe, matte.engine, matte.device) == ("inspyrenet-swinb", "torch", "cpu")
        image = Image.open(io.BytesIO(matte.matte_png))
        assert (image.mode, image.size) == ("L", (61, 41))
        assert np.isfinite(np.asarray(image)).all()
        assert Image.open(io.BytesIO(matte.cutout_png)).size == (61, 41)


def test_every_output_from_the_matte_the_route_hands_over_on_its_device(
    inspyrenet_server: tuple[servers.Process, servers.FileServer], photos: dict[str, Path]
) -> None:
    """The route answers its mattes as tensors on its device (routes.MATTE makes the outputs there):
    each output is what its definition gives from the answered matte (the CPU here; tests/gpu on CUDA)."""
    process, _ = inspyrenet_server
    picture = Image.open(photos["chelsea.png"]).convert("RGB").resize((61, 41))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    with AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.matte", "inspyrenet-swinb"))
        result = ai.remove_background(
            out.getvalue(), recipe="inspyrenet-swinb", outputs="matte,cutout,composite,mask", bg_blur=3.0
        )
    assert result.matte is not None and result.cutout is not None and result.composite is not None
    assert result.mask is not None
    matte = np.asarray(Image.open(io.BytesIO(result.matte.data)))
    cutout = np.array(Image.open(io.BytesIO(result.cutout.data)))
    assert np.array_equal(cutout[:, :, 3], matte)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(result.mask.data))), matte > 127)
    pixels = torch.from_numpy(np.array(picture))
    behind = matte_outputs.background_layer(Blur(3.0), pixels)
    expected = matte_outputs.composite(torch.from_numpy(cutout), behind, opaque=True).numpy()
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(result.composite.data))), expected)


def test_other_bytes_are_refused_by_hash(
    inspyrenet_server: tuple[servers.Process, servers.FileServer], made: dict[str, Checkpoint], tmp_path: Path
) -> None:
    _, files = inspyrenet_server
    recipes = _catalogue(tmp_path / "recipes.toml", made["random"], f"{files.url}/other.safetensors")
    with servers.running(servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(recipes)})) as other:
        with AiClient(app_id="tests", target=other.address) as ai, pytest.raises(CraftAiError) as caught:
            list(ai.setup("image.matte", "inspyrenet-swinb"))
        assert caught.value.reason == "SOURCES_FAILED"
        assert (
            f"expected {made['random'].pin.size:,} bytes, SHA-256 {made['random'].pin.sha256}" in caught.value.message
        )
        # The same wrong file put in the store by hand: the infer service refuses it by its hash.
        (tmp_path / "store" / STORE_FILE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made["missing-key"].path, tmp_path / "store" / STORE_FILE)
        with AiClient(app_id="tests", target=other.address) as ai, pytest.raises(CraftAiError) as caught:
            ai.remove_background(photos_png(), outputs="matte", recipe="inspyrenet-swinb")
        assert caught.value.reason == "ROUTE_NOT_SET_UP" and made["random"].pin.sha256 in caught.value.message


def photos_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("crafted", "words"),
    [
        ("missing-key", "missing tensors: 1 (decoder.conv5.conv.weight)"),
        ("extra-key", "unexpected tensors: 1 (decoder.conv6.conv.weight)"),
        ("wrong-shape", "attention0.threshold is F32[2], expected F32[1]"),
    ],
)
def test_a_file_that_does_not_fit_the_network_is_refused_naming_the_keys(
    made: dict[str, Checkpoint], tmp_path: Path, crafted: str, words: str
) -> None:
    """Pinned by its own hash (so it passes the hash check), the file is refused by the loader.
    The store is filled by copying, as prepare would have, to keep the test short."""
    checkpoint = made[crafted]
    recipes = _catalogue(tmp_path / "recipes.toml", checkpoint, "http://127.0.0.1:9/unused")
    target = tmp_path / "store" / STORE_FILE
    target.parent.mkdir(parents=True)
    shutil.copyfile(checkpoint.path, target)
    process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(recipes)})
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(photos_png(), outputs="matte", recipe="inspyrenet-swinb")
        assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION and caught.value.reason == "MODEL_REFUSED"
        assert words in caught.value.message, caught.value.message
