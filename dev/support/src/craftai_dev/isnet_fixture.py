"""Stand-ins for rembg's IS-Net files (isnet-general-use, isnet-anime), which cannot be had here: the
reference networks (craftai_dev.isnet_reference) with random weights, calibrated, exported to ONNX
in the form the published files have (evidence: docs/research/weights.md), cached under
<repo>/.cache/fixtures/:

- isnet-general-use: the DIS authors' ISNetDIS, input `input_image` f32[1, 3, 1024, 1024], twelve
  outputs (six sigmoid maps at the input's size, the first `output_image`, then six features);
- isnet-anime: SkyTNT's export, `sigmoid(ISNetDIS(img)[0][0])`, input `img`, one output `mask`
  f32[1, 1, 1024, 1024], opset 11.

Calibration (craftai_dev.calibration), so that a matte is not one value or noise: every BatchNorm
gets its input's statistics on the four sample photos at once (at 512², where the four fit in a few
GB), then the first side readout is fitted to the real u2netp's matte of one photo, as ±4 logits,
at 1024² as the route runs it, on FIT_ROWS of the readout's 512² positions drawn by the seed (a fit
over all of them was the calibration's largest step, for no better a matte). Each file answers every
sample photo with a matte of many levels (tests/parity/test_isnet_rembg.py checks it on each). The
calibrated network's state is kept beside the files: the tests that run the reference network itself
load it rather than calibrate it again. Made with the file, the readout's input is the export's own
forward (on the calibration photo: the graph does not depend on the input's values), the fitted
readout then written into the exported graph: one forward at 1024² less, the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from craftai_dev import calibration
from craftai_dev.cache import CACHE, exclusive

if TYPE_CHECKING:
    from craftai_infer.pipelines import matte_u2netp

SEED = 0
VERSION = 3  # bump when what is made here changes: a new cache folder
CALIBRATION_PHOTO = "astronaut.png"
RECIPES = ("isnet-general-use", "isnet-anime")
FIT_ROWS = 8_192  # of the readout's 262,144 positions: ~14 a weight (64·3·3 and the bias)


class _Published(nn.Module):
    """The network's answer in the published file's outputs."""

    def __init__(self, net: nn.Module, anime: bool) -> None:
        super().__init__()
        self.net = net
        self.anime = anime

    def forward(self, x: torch.Tensor) -> object:
        maps, features = self.net(x)
        if self.anime:
            return maps[0].sigmoid()
        return (*maps, *features)


def steps(recipe: str) -> matte_u2netp.Steps:
    """What rembg's session of the recipe feeds its network."""
    from craftai_infer.pipelines import matte_u2netp

    return matte_u2netp.ISNET_ANIME if recipe == "isnet-anime" else matte_u2netp.ISNET


def photo_batch(recipe: str, names: list[str], side: int | None = None) -> torch.Tensor:
    """The sample photos `names`, each as the pipeline feeds the recipe's network, stacked; at
    `side`² rather than the network's size where given."""
    from dataclasses import replace

    from PIL import Image

    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp

    norm = steps(recipe)
    if side is not None:
        norm = replace(norm, size=side)
    arrays = []
    for name in names:
        rgb = np.asarray(Image.open(photos()[name]).convert("RGB"))
        arrays.append(matte_u2netp.preprocess(rgb, steps=norm).copy())
    return torch.from_numpy(np.concatenate(arrays))


def _target(side: int) -> torch.Tensor:
    """The real u2netp's matte of the calibration photo at `side`², as ±4 logits."""
    from PIL import Image

    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp
    from craftai_models.onnx_sessions import open_session

    u2netp = open_session(u2netp_onnx(), "cpu")
    rgb = np.asarray(Image.open(photos()[CALIBRATION_PHOTO]).convert("RGB"))
    fused = u2netp.run(None, {u2netp.get_inputs()[0].name: matte_u2netp.preprocess(rgb)})[0]
    subject = matte_u2netp.postprocess(fused, (side, side)).astype(np.float32) / 255.0
    return torch.from_numpy(8.0 * (subject - 0.5))[None, None]


def _folder() -> Path:
    return CACHE / "fixtures" / f"isnet-{SEED}-{VERSION}"


def _network(recipe: str) -> nn.Module:
    from craftai_dev.isnet_reference import anime_class, dis_class

    return (anime_class() if recipe == "isnet-anime" else dis_class())().eval()


def _state(recipe: str) -> Path:
    return _folder() / f"{recipe}.calibrated.safetensors"


def calibrated(recipe: str) -> nn.Module:
    """The recipe's reference network with random weights, calibrated on the sample photos (eval, CPU):
    calibrated once, its state (parameters and BatchNorm statistics) then loaded from the cache. One
    lock a recipe: a process that needs the state while another makes it waits for it rather than
    making it too."""
    path = _state(recipe)
    if not path.exists():
        with exclusive(f"{_folder().name}-{recipe}"):
            if not path.exists():
                net = _batchnorms_calibrated(recipe)
                readout = _readout(net)
                features = calibration.readout_input(net, readout, lambda: net(_calibration_input(recipe)))
                _fit(readout, features)
                _save_state(net, path)
    return _loaded(recipe)


def _loaded(recipe: str) -> nn.Module:
    net = _network(recipe)
    net.load_state_dict(load_file(str(_state(recipe))), strict=True)
    return net


def _batchnorms_calibrated(recipe: str) -> nn.Module:
    """The random network, every BatchNorm given its input's statistics on the sample photos."""
    from craftai_dev.samples import PHOTOS

    torch.manual_seed(SEED)
    net = _network(recipe)
    every = photo_batch(recipe, list(PHOTOS), side=512)
    calibration.calibrate_batchnorm(net, lambda: net(every), seed=SEED)
    return net


def _readout(net: nn.Module) -> nn.Conv2d:
    readout = net.get_submodule("side1")
    assert isinstance(readout, nn.Conv2d)
    return readout


def _calibration_input(recipe: str) -> torch.Tensor:
    return photo_batch(recipe, [CALIBRATION_PHOTO])


def _fit(readout: nn.Conv2d, features: torch.Tensor) -> None:
    calibration.fit_readout(readout, features, _target(features.shape[-1]), rows=FIT_ROWS, seed=SEED)


def _save_state(net: nn.Module, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(partial))
    partial.replace(path)


def _export(recipe: str, path: Path) -> None:
    """The recipe's stand-in file; its calibrated state too where it is not made yet (the readout
    fitted to its input in the export's own forward, then written into the graph)."""
    with exclusive(f"{_folder().name}-{recipe}"):
        if _state(recipe).exists():
            _trace(recipe, _loaded(recipe), torch.zeros(1, 3, 1024, 1024), path)
            return
        net = _batchnorms_calibrated(recipe)
        readout = _readout(net)
        partial = path.with_suffix(".traced")
        features = calibration.readout_input(
            net, readout, lambda: _trace(recipe, net, _calibration_input(recipe), partial)
        )
        _fit(readout, features)
        _save_state(net, _state(recipe))
    _write_readout(partial, readout, path)


def _trace(recipe: str, net: nn.Module, example: torch.Tensor, path: Path) -> None:
    """`net` exported in the published file's form to `path` (atomically), traced on `example`."""
    anime = recipe == "isnet-anime"
    if anime:  # SkyTNT's export.py
        inputs, outputs = ["img"], ["mask"]
    else:
        inputs = ["input_image"]
        outputs = ["output_image", *(f"d{i}" for i in range(2, 7)), *(f"f{i}" for i in range(1, 7))]
    partial = path.with_suffix(".part")
    torch.onnx.export(
        _Published(net, anime).eval(),
        (example,),
        str(partial),
        dynamo=False,  # the legacy TorchScript exporter: one file, no external data, as the published files
        export_params=True,
        opset_version=11,
        do_constant_folding=True,
        input_names=inputs,
        output_names=outputs,
    )
    partial.replace(path)


def _write_readout(traced: Path, readout: nn.Conv2d, path: Path) -> None:
    """The graph at `traced` with `readout`'s weights as they are now (its initializers
    `net.side1.*`, exported before the fit), atomically to `path`; `traced` removed."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(traced))
    weights = {"net.side1.weight": readout.weight, "net.side1.bias": readout.bias}
    found = [i for i in model.graph.initializer if i.name in weights]
    assert sorted(i.name for i in found) == sorted(weights), [i.name for i in found]
    for initializer in found:
        value = weights[initializer.name]
        assert value is not None
        initializer.CopyFrom(numpy_helper.from_array(value.detach().numpy(), initializer.name))
    partial = path.with_suffix(".part")
    onnx.save(model, str(partial))
    partial.replace(path)
    traced.unlink()


def onnx_files() -> dict[str, Path]:
    """recipe -> its stand-in ONNX file (made once, then read from the cache)."""
    folder = _folder()
    paths = {name: folder / f"{name}.onnx" for name in RECIPES}
    if all(p.exists() for p in paths.values()):
        return paths
    with exclusive(folder.name):
        folder.mkdir(parents=True, exist_ok=True)
        for name, path in paths.items():
            if not path.exists():
                with torch.no_grad():
                    _export(name, path)
    return paths
