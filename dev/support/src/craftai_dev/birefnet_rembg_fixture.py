"""Stand-ins for rembg's BiRefNet files (birefnet-general, -portrait, -dis, -hrsod, -cod, -massive,
and bria-rmbg), which cannot be had here, all with the published contract (`input_image`
f32[1, 3, 1024, 1024] in, `output_image` logits f32[1, 1, 1024, 1024] out); cached under
<repo>/.cache/fixtures/:

- birefnet-general and bria-rmbg: the calibrated BiRefNet_lite graph of craftai_dev.birefnet_fixture
  (this project's network, proven against nobg's reference), its last convolution scaled and
  shifted per recipe; bria-rmbg's with the sigmoid inside the graph, as BRIA's graph answers it.
- the other five: a small graph of the same contract each (two convolutions, seeded weights of its
  own): they run on the same route class with the same steps as birefnet-general, so what their
  tests show is that each recipe is served from its own file with rembg's answer, which a small
  graph shows as well as the network at ~10 s a picture on two cores.

Swin-T, not the published Swin-L, for the network: what the route and rembg do around a graph is
the same for every graph of the contract, and a Swin-L stand-in would be a 0.9 GB file taking ~30 s a
picture on two cores (docs/research/weights.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from craftai_dev import stand_ins
from craftai_dev.cache import CACHE, exclusive

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import onnx

VERSION = 4  # bump when what is made here changes: a new cache folder
READOUT = "decoder.conv_out1.0"
# recipe -> (scale, shift) of the network's logits (the first: the calibrated graph as exported);
# the recipes outside NETWORK get a small graph of the contract instead
VARIANTS: dict[str, tuple[float, float]] = {
    "birefnet-general": (1.0, 0.0),
    "birefnet-portrait": (1.3, 0.4),
    "birefnet-dis": (0.8, -0.3),
    "birefnet-hrsod": (1.6, -0.8),
    "birefnet-cod": (0.6, 0.5),
    "birefnet-massive": (1.2, -0.5),
    "bria-rmbg": (0.9, 0.2),
}


SIGMOID_INSIDE = {"bria-rmbg"}
NETWORK = {"birefnet-general", "bria-rmbg"}  # the others: small graphs of the contract


def contract_graph(path: Path, seed: int, size: int = 1024) -> None:
    """A small graph of the published contract: conv 3x3 (3 -> 8), ReLU, conv 3x3 (8 -> 1) at
    `size`², seeded weights; its logits vary with the picture's colours and edges, and its last bias
    puts their median over the four sample photos at 0 (each photo then has subject and background)."""
    import numpy as np
    import onnx

    rng = np.random.default_rng(seed)
    weights = (
        rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32),
        rng.normal(0, 0.2, (8,)).astype(np.float32),
        rng.normal(0, 0.5, (1, 8, 3, 3)).astype(np.float32),
    )
    draft = _small_graph(*weights, np.zeros(1, np.float32), size=size)
    median = float(np.median(np.concatenate([m.ravel() for m in _logits_on_photos(draft, size)])))
    partial = path.with_suffix(".part")
    onnx.save(_small_graph(*weights, np.asarray([-median], np.float32), size=size), str(partial))
    partial.replace(path)


def _logits_on_photos(model: onnx.ModelProto, size: int) -> list[npt.NDArray[np.float32]]:
    """The graph's logits on the four sample photos, fed as rembg feeds its BiRefNet sessions."""
    from dataclasses import replace

    import numpy as np
    from PIL import Image

    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp
    from craftai_models.onnx_sessions import open_session

    session = open_session(model.SerializeToString(), "cpu")
    found = []
    for path in photos().values():
        rgb = np.asarray(Image.open(path).convert("RGB"))
        steps = replace(matte_u2netp.BIREFNET, size=size)
        found.append(session.run(None, {"input_image": matte_u2netp.preprocess(rgb, steps=steps)})[0])
    return found


def _small_graph(
    w1: npt.NDArray[np.float32],
    b1: npt.NDArray[np.float32],
    w2: npt.NDArray[np.float32],
    b2: npt.NDArray[np.float32],
    *,
    size: int,
) -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    tensors = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [
        helper.make_node("Conv", ["input_image", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["output_image"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "contract",
        [helper.make_tensor_value_info("input_image", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output_image", TensorProto.FLOAT, [1, 1, size, size])],
        tensors,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def hr_file() -> Path:
    """A small graph of BiRefNet_HR's contract (f32[1, 3, 2048, 2048] in, its logits first out), for
    birefnet-hr's route: what is checked there is the authors' steps at the graph's own size."""
    from craftai_dev import birefnet_fixture

    path = CACHE / "fixtures" / f"birefnet-hr-{birefnet_fixture.SEED}-{VERSION}" / "birefnet-hr.onnx"
    if not path.exists():
        with exclusive(path.parent.name):
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                contract_graph(path, len(VARIANTS), size=2048)
    return path


def onnx_files() -> dict[str, Path]:
    """recipe -> its stand-in ONNX file (made once, then read from the cache)."""
    from craftai_dev import birefnet_fixture

    folder = CACHE / "fixtures" / f"birefnet-rembg-{birefnet_fixture.SEED}-{VERSION}"
    paths = {name: folder / f"{name}.onnx" for name in VARIANTS}
    if all(p.exists() for p in paths.values()):
        return paths
    base = birefnet_fixture.onnx_file().path
    with exclusive(folder.name):
        folder.mkdir(parents=True, exist_ok=True)
        for seed, (name, path) in enumerate(paths.items()):
            if path.exists():
                continue
            if name in NETWORK:
                stand_ins.scaled_readout(base, path, READOUT, *VARIANTS[name], sigmoid=name in SIGMOID_INSIDE)
            else:
                contract_graph(path, seed)
    return paths
