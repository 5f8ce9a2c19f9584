"""IS-Net on torch (isnet-general-use, isnet-anime): each recipe's torch route prepared by the prepare
service of a real server from its published-form file (the converter follows the graph and checks
itself against onnxruntime on its probe before it keeps anything: its figures are read in the
manifest), then the route's matte through the server against rembg's matte on a test picture, and on
that picture the general graph's six maps against the prepared network's (its rembg matte made from
onnxruntime's first map as rembg makes it; isnet-anime's is rembg's own answer, kept for the run:
tests/parity/test_isnet_rembg.py compares the onnxruntime route with it).

Neither file can be downloaded here: each recipe is pinned to its stand-in, the reference network
(the DIS authors' IS-Net; SkyTNT's copy) with random weights calibrated on the photos, exported in
the published file's form, fixed resize sizes included (craftai_dev.isnet_fixture). The graphs take
1024² only, so every comparison runs at that size.

Sides 2 to 6 agree within 1e-4; side 1, the served map, is held to the converter's own tolerance:
the stand-ins' fitted readout sums activations that cancel, and both engines are ~3e-4 off a float64
run there (tests/parity/test_isnet_network.py shows the same for the reference's own float32 answer;
the converter's docstring says what a mistake costs). The anime graph answers side 1 alone: its
float comparison is the probe's, its picture's the matte's."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from PIL import Image
from safetensors.torch import load_file

from craftai import AiClient
from craftai_dev import isnet_fixture, rembg_peer, servers, stand_ins
from craftai_dev.masks import NEAR_MATTE_MAX_DIFF
from craftai_infer.pipelines import matte_u2netp
from craftai_prepare.converters import ConversionError, isnet
from craftai_prepare.converters import u2netp as converter

pytestmark = pytest.mark.slow
NETWORKS = {"isnet-general-use": isnet.GENERAL, "isnet-anime": isnet.ANIME}
PHOTO = {"isnet-general-use": "chelsea.png", "isnet-anime": "coffee.png"}
SIDES_MAX_ABS = 1e-4


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return isnet_fixture.onnx_files()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("isnet-torch")


@pytest.fixture(scope="module")
def server(files: dict[str, Path], work: Path) -> Iterator[servers.Process]:
    """`craftai serve` with both recipes pinned to their stand-ins (a loopback source), nothing set up."""
    with stand_ins.serving(files, work, []) as process:
        yield process


@pytest.mark.parametrize("recipe", list(NETWORKS))
def test_the_prepared_torch_route_is_the_published_graph(
    recipe: str,
    server: servers.Process,
    files: dict[str, Path],
    work: Path,
    photos: dict[str, Path],
    rembg_answers: rembg_peer.Answers,
    tmp_path: Path,
) -> None:
    network, photo = NETWORKS[recipe], PHOTO[recipe]
    with AiClient(app_id="tests", target=server.address) as ai:
        events = list(ai.setup("image.matte", recipe, engine="torch"))
        assert any("checking the converted network against onnxruntime" in str(e) for e in events), events
        (weights,) = (work / "store" / "prepared").rglob(network.weights)
        probed = json.loads((weights.parent / "manifest.json").read_text())["verification"]
        assert sorted(probed) == [f"max_abs_{name}" for name in network.outputs], probed
        assert 0 < probed["max_abs_side_1"] <= isnet.SERVED_MAX_ABS_TOLERANCE, probed

        answer = ai.remove_background(photos[photo], outputs="matte", recipe=recipe, engine="torch")
        assert (answer.recipe, answer.engine) == (recipe, "torch")
        matte = np.asarray(Image.open(io.BytesIO(answer.matte_png))).astype(int)
        height, width = matte.shape
        if len(network.outputs) > 1:  # the general graph's six maps (the anime graph's one is above)
            x = isnet_fixture.photo_batch(recipe, [photo]).numpy()  # as the route feeds the network
            theirs = converter.run_reference(onnx.load(str(files[recipe])), x, threads=0)
            ours = converter.run_converted(load_file(weights), x, network)
            found = converter.differences(ours, theirs[: len(ours)], network.outputs)
            converter.check(found, network)
            assert all(d.max_abs <= SIDES_MAX_ABS for d in found[1:]), found
            rembgs = matte_u2netp.postprocess(theirs[0], (width, height), isnet_fixture.steps(recipe)).astype(int)
        else:
            chosen = {photo: photos[photo]}
            rembgs = rembg_answers.mattes(recipe, files[recipe], chosen, tmp_path)[photo].astype(int)
        assert int(np.abs(matte - rembgs).max()) <= NEAR_MATTE_MAX_DIFF, recipe
        flipped = (matte > 127) != (rembgs > 127)  # only where onnxruntime's matte is one level from the cut
        assert set(np.unique(rembgs[flipped]).tolist()) <= {127, 128}, recipe
        assert 0.05 < float((matte > 127).mean()) < 0.95, recipe  # subject and background both there


def _value(node: onnx.NodeProto) -> np.ndarray:
    (attr,) = node.attribute
    return numpy_helper.to_array(attr.t) if attr.type == onnx.AttributeProto.TENSOR else np.zeros(0)


def test_a_resize_to_another_size_is_refused(files: dict[str, Path]) -> None:
    """The graphs' resize sizes are constants: each is checked to be the skip tensor's size at the
    graph's input size, before anything runs."""
    edited = onnx.load(str(files["isnet-anime"]))
    sizes = [n for n in edited.graph.node if n.op_type == "Constant" and _value(n).tolist() == [512, 512]]
    sizes[0].attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([511, 512], dtype=np.int64)))
    told = r"sizes \[1, 32, 511, 512\] at the graph's input size, where isnet-anime resizes \(256, 256\)"
    with pytest.raises(ConversionError, match=told):
        converter.convert(edited, isnet.ANIME)
