"""BiRefNet_lite through the services, with the calibrated random checkpoint and its ONNX export
(the published contract) pinned by a test catalogue and served on loopback: each engine's setup
fetches that engine's file only; both engines answer a matte at the picture's size and agree
within one grey level; every output of image.matte (cutout, composite, mask; PNG and WebP) is what
the outputs' pipeline makes from the answered matte on both engines (the torch route's matte is a
tensor, the onnxruntime route's a host array); files that do not fit are refused naming the keys;
the `craftai` command sets the recipe up (the CPU advice's route, torch) and removes a background on
both engines. Cost: three forwards at the recipe's 1024² (one on torch, two on onnxruntime), about
a minute of CPU time for the module. The torch route's proof of its patch order against the ONNX
is tested on its own, at 512² (test_birefnet_order.py): here the torch route is prepared without it.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, RouteState
from craftai_dev import catalogues, servers
from craftai_dev.birefnet_fixture import Checkpoint, checkpoints, onnx_file
from craftai_infer.pipelines import matte_outputs
from craftai_infer.pipelines.matte_spec import Blur, OutputsSpec, Solid

pytestmark = pytest.mark.slow
RECIPE = "birefnet-lite"
WEIGHTS = "model.safetensors"
NETWORK = "BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx"


@pytest.fixture(scope="module")
def made() -> dict[str, Checkpoint]:
    return {**checkpoints(), "onnx": onnx_file()}


def _catalogue(path: Path, weights: Checkpoint, network: Checkpoint, url: str) -> Path:
    data = catalogues.real_data()
    recipe = catalogues.recipe(data, RECIPE)
    for pinned in recipe["files"]:
        made = weights if pinned["role"] == "weights" else network
        pinned.update(size=made.pin.size, sha256=made.pin.sha256, sources=[{"url": f"{url}/{pinned['name']}"}])
    for route in recipe["routes"]:
        route.pop("checked_against", None)  # the proof at 1024² would cost a minute here: its own module
    return catalogues.write(path, data)


@pytest.fixture(scope="module")
def served(
    made: dict[str, Checkpoint], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[servers.Process, servers.FileServer]]:
    root = tmp_path_factory.mktemp("birefnet")
    (root / "files").mkdir()
    (root / "files" / WEIGHTS).symlink_to(made["random"].path)
    (root / "files" / NETWORK).symlink_to(made["onnx"].path)
    with servers.FileServer(root / "files") as files:
        recipes = _catalogue(root / "recipes.toml", made["random"], made["onnx"], files.url)
        process = servers.embedded(root / "store", root, {"CRAFTAI_RECIPES": str(recipes)})
        with servers.running(process):
            yield process, files


def _png(path: Path) -> bytes:
    out = io.BytesIO()
    Image.open(path).convert("RGB").save(out, format="PNG")
    return out.getvalue()


def test_each_engine_sets_up_with_its_own_file_only(served: tuple[servers.Process, servers.FileServer]) -> None:
    process, files = served
    with AiClient(app_id="tests", target=process.address) as ai:
        resolved = ai.resolve("image.matte", RECIPE, "torch")
        assert [f.name for f in resolved.recipe.files] == [WEIGHTS]
        result = list(ai.setup("image.matte", RECIPE, "torch"))[-1]
        assert [(f.name, f.downloaded) for f in result.files] == [(WEIGHTS, True)]  # type: ignore[union-attr]
        assert f"/{NETWORK}" not in files.requests
        states = {s.route.engine: s for s in ai.status("image.matte", RECIPE)}
        assert states["torch"].state == RouteState.PREPARED
        assert states["onnxruntime"].state == RouteState.MISSING
        assert [f.name for f in states["onnxruntime"].files] == [NETWORK]
        result = list(ai.setup("image.matte", RECIPE, "onnxruntime"))[-1]
        assert [(f.name, f.downloaded) for f in result.files] == [(NETWORK, True)]  # type: ignore[union-attr]
        listed = next(r for f in ai.features() for r in f.recipes if r.name == RECIPE)
        assert {f.name: list(f.engines) for f in listed.files} == {NETWORK: ["onnxruntime"], WEIGHTS: ["torch"]}


def test_both_engines_matte_at_the_pictures_size_and_agree(
    served: tuple[servers.Process, servers.FileServer], photos: dict[str, Path], tmp_path: Path
) -> None:
    """`craftai setup image.matte --recipe birefnet-lite` (the CPU advice: torch) and
    `craftai remove-background --recipe birefnet-lite` with every output, then the same picture
    through the SDK on onnxruntime (the network exported with the published contract): the same
    matte within one grey level (the pipeline is shared), at the picture's size; on each engine the
    cutout, composite and mask are exactly what the outputs' pipeline makes from that matte; the
    command on onnxruntime answers the SDK's matte."""
    process, _ = served
    env = {**os.environ, "CRAFTAI_ADDRESS": process.address}
    picture = np.asarray(Image.open(photos["chelsea.png"]).convert("RGB"))

    def craftai(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(servers.BIN / "craftai"), *args], check=False, env=env, capture_output=True, text=True, timeout=600
        )

    def made_from(matte: np.ndarray, spec: OutputsSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cutout, composite and mask that the outputs' pipeline makes from `matte`."""
        made = matte_outputs.render(picture, matte.astype(np.uint8), spec, "cpu")
        assert made.cutout is not None and made.composite is not None and made.mask is not None
        return made.cutout, made.composite, made.mask

    setup = craftai("setup", "image.matte", "--recipe", RECIPE)
    assert setup.returncode == 0, setup.stderr
    assert f"image.matte {RECIPE} (torch)" in setup.stdout
    assert f"{RECIPE}/{WEIGHTS}" in setup.stdout and NETWORK not in setup.stdout
    out = tmp_path / "out"
    outputs = ("--outputs", "matte,cutout,composite,mask", "--bg-color", "#2060f0")
    run = craftai("remove-background", str(photos["chelsea.png"]), "--recipe", RECIPE, *outputs, "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert f"chelsea.png: 451x300 {RECIPE}/torch on cpu:" in run.stdout
    matte = Image.open(out / "chelsea.matte.png")
    assert (matte.mode, matte.size) == ("L", (451, 300))
    assert Image.open(out / "chelsea.cutout.png").size == (451, 300)
    torch_matte = np.asarray(matte).astype(int)
    expected = made_from(
        torch_matte, OutputsSpec(frozenset({"cutout", "composite", "mask"}), background=Solid((0x20, 0x60, 0xF0, 255)))
    )
    for name, made in zip(("cutout", "composite", "mask"), expected, strict=True):
        assert np.array_equal(np.asarray(Image.open(out / f"chelsea.{name}.png")), made), name

    with AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.matte", RECIPE, "onnxruntime"))
        answer = ai.remove_background(
            _png(photos["chelsea.png"]),
            outputs="matte,cutout,composite,mask",
            bg_blur=6.0,
            threshold=0.3,
            format={"cutout": "webp"},
            recipe=RECIPE,
            engine="onnxruntime",
        )
    assert (answer.recipe, answer.engine, answer.device) == (RECIPE, "onnxruntime", "cpu")
    onnx_matte = np.asarray(Image.open(io.BytesIO(answer.matte_png))).astype(int)
    assert onnx_matte.shape == (300, 451)
    assert torch_matte.std() > 10, "the calibrated fixture's matte should vary across the photo"
    assert np.abs(torch_matte - onnx_matte).max() <= 1
    a, b = torch_matte > 127, onnx_matte > 127
    assert 0.05 < a.mean() < 0.95
    assert (a & b).sum() / (a | b).sum() >= 0.999
    assert answer.cutout is not None and answer.composite is not None and answer.mask is not None
    assert answer.cutout.format == "webp"
    expected = made_from(
        onnx_matte, OutputsSpec(frozenset({"cutout", "composite", "mask"}), background=Blur(6.0), threshold=0.3)
    )
    for name, image, made in zip(
        ("cutout", "composite", "mask"), (answer.cutout, answer.composite, answer.mask), expected, strict=True
    ):
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(image.data))), made), name
    # and the command on that engine: the same route, the same matte
    on_onnx = ("--recipe", RECIPE, "--engine", "onnxruntime", "--outputs", "matte", "-o", str(tmp_path / "onnx.png"))
    run = craftai("remove-background", str(photos["chelsea.png"]), *on_onnx)
    assert run.returncode == 0, run.stderr
    assert f"chelsea.png: 451x300 {RECIPE}/onnxruntime on cpu:" in run.stdout
    assert np.array_equal(np.asarray(Image.open(tmp_path / "onnx.png")), onnx_matte)


@pytest.mark.parametrize(
    ("crafted", "words"),
    [
        ("missing-key", "missing tensors: 1 (decoder.conv_out1.0.weight)"),
        ("wrong-shape", "decoder.ipt_blk5.conv1.weight is F32[64x768x3x3], expected F32[64x3072x3x3]"),
    ],
)
def test_a_file_that_does_not_fit_the_network_is_refused_naming_the_keys(
    made: dict[str, Checkpoint], tmp_path: Path, crafted: str, words: str
) -> None:
    """The torch route's preparation reads the checkpoint strictly: a file of its pin (here a crafted
    one, already in the store) that does not fit is refused at setup, nothing prepared, and the
    route is not served."""
    checkpoint = made[crafted]
    recipes = _catalogue(tmp_path / "recipes.toml", checkpoint, made["onnx"], "http://127.0.0.1:9/unused")
    target = tmp_path / "store" / "models" / RECIPE / WEIGHTS
    target.parent.mkdir(parents=True)
    shutil.copyfile(checkpoint.path, target)
    process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(recipes)})
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        with pytest.raises(CraftAiError) as caught:
            list(ai.setup("image.matte", RECIPE, "torch"))
        assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert caught.value.reason == "PREPARATION_FAILED"
        assert words in caught.value.message, caught.value.message
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(_tiny_png(), outputs="matte", recipe=RECIPE, engine="torch")
        assert caught.value.reason == "ROUTE_NOT_SET_UP"


def _tiny_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()
