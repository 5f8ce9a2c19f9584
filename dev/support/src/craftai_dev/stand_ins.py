"""What the stand-ins of published ONNX files share: a graph made into per-recipe variants by editing
its readout's initializers (other bytes, other mattes, without exporting the network again), and a
`craftai serve` whose recipes are pinned to the stand-ins and set up from a loopback source, as the
prepare service sets up a real download."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from craftai_dev import catalogues, servers
from craftai_dev.files import sha256_of


def scaled_readout(
    exported: Path, path: Path, readout: str, scale: float, shift: float, *, sigmoid: bool = False
) -> None:
    """`exported` with the convolution `readout`'s output scaled by `scale` and shifted by `shift`
    (its weight and bias edited), and where `sigmoid` the graph's one output passed through a
    sigmoid appended to the graph; written atomically to `path`."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(exported))
    tensors = {t.name: t for t in model.graph.initializer}
    weight = numpy_helper.to_array(tensors[f"{readout}.weight"])
    bias = numpy_helper.to_array(tensors[f"{readout}.bias"])
    tensors[f"{readout}.weight"].CopyFrom(numpy_helper.from_array(weight * np.float32(scale), f"{readout}.weight"))
    tensors[f"{readout}.bias"].CopyFrom(
        numpy_helper.from_array(bias * np.float32(scale) + np.float32(shift), f"{readout}.bias")
    )
    if sigmoid:
        (output,) = model.graph.output
        (last,) = [n for n in model.graph.node if output.name in n.output]
        last.output[list(last.output).index(output.name)] = "logits"
        model.graph.node.append(helper.make_node("Sigmoid", ["logits"], [output.name]))
    partial = path.with_suffix(".part")
    onnx.save(model, str(partial))
    partial.replace(path)


def _onnx_file(data: dict[str, Any], recipe: str) -> dict[str, Any]:
    """The recipe's one file its onnxruntime route loads (a recipe may have others for other engines)."""
    files: list[dict[str, Any]] = catalogues.recipe(data, recipe)["files"]
    (pin,) = [f for f in files if "onnxruntime" in f.get("engines", ["onnxruntime"])]
    return pin


@contextlib.contextmanager
def serving(
    files: Mapping[str, Path], work: Path, set_up: list[str], env: Mapping[str, str] | None = None
) -> Iterator[servers.Process]:
    """`craftai serve` with each recipe of `files` pinned to its file (its onnxruntime route's, under its
    published name), served from a loopback HTTP server; the recipes `set_up` set up by the prepare service, each
    checked to have kept the pinned bytes; `env`: the server's settings beside that."""
    from craftai import AiClient

    data = catalogues.real_data()
    (work / "files").mkdir(parents=True)
    for name, path in files.items():
        pin = _onnx_file(data, name)
        (work / "files" / name).mkdir()
        (work / "files" / name / pin["name"]).symlink_to(path)
    with servers.FileServer(work / "files") as source:
        for name, path in files.items():
            catalogues.pin_files(data, name, {_onnx_file(data, name)["role"]: path}, f"{source.url}/{name}")
        settings = {"CRAFTAI_RECIPES": str(catalogues.write(work / "recipes.toml", data)), **(env or {})}
        with servers.running(servers.embedded(work / "store", work, settings)) as process:
            with AiClient(app_id="tests", target=process.address) as ai:
                for name in set_up:
                    events = list(ai.setup("image.matte", name))
                    assert events[-1].files[0].sha256 == sha256_of(files[name])  # type: ignore[union-attr]
            yield process


def assert_rembgs_mattes(
    address: str,
    recipe: str,
    theirs: Mapping[str, np.ndarray],
    pictures: Mapping[str, Path],
    min_share: float,
    *,
    part: str | None = None,
    levels: int = 64,
) -> None:
    """Each picture's matte from the server at `address` on `recipe` (onnxruntime; of `part` where
    given) is `theirs` byte for byte, and not trivial: at least `levels` levels, more than
    `min_share` of it subject and of it background."""
    import io

    from PIL import Image

    from craftai import AiClient

    with AiClient(app_id="tests", target=address) as ai:
        for name, path in pictures.items():
            answer = ai.remove_background(path, outputs="matte", recipe=recipe, part=part)
            assert (answer.recipe, answer.engine) == (recipe, "onnxruntime")
            ours = np.asarray(Image.open(io.BytesIO(answer.matte_png)))
            assert ours.shape == theirs[name].shape, name
            worst = int(np.abs(ours.astype(int) - theirs[name]).max())
            assert np.array_equal(ours, theirs[name]), (recipe, part, name, worst)
            share = float((ours > 127).mean())
            assert len(np.unique(ours)) >= levels and min_share < share < 1 - min_share, (recipe, name, share)


def with_a_large_picture(
    photos: Mapping[str, Path], folder: Path, source: str, size: tuple[int, int]
) -> dict[str, Path]:
    """The sample photos and `source` enlarged to `size` (width, height) as a JPEG, `large.jpg`: a
    picture over 2000 px for the parity tests."""
    from PIL import Image

    large = folder / "large.jpg"
    Image.open(photos[source]).convert("RGB").resize(size, Image.Resampling.LANCZOS).save(large, quality=90)
    return {**photos, "large.jpg": large}
