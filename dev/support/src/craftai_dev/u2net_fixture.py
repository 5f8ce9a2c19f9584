"""Stand-ins for the published U²-Net family files that cannot be had here (u2net_human_seg, silueta;
u2net itself is real: craftai_dev.files.u2net_onnx): the authors' network
(craftai_dev.u2net_reference) with random weights, calibrated, exported to ONNX as rembg's files are
(input `input.1` f32[1, 3, H, W], 320² in use; seven outputs, the sigmoid inside the graph, the fused
map first); cached under <repo>/.cache/fixtures/. The picture's height and width are left named in
the export, so that the resizes take their sizes from the tensors' shapes, as in the published
graphs (a fixed-size export folds them into constants, which the torch route's conversion refuses).

Calibration (craftai_dev.calibration), so that a matte is not one value or noise: every BatchNorm
gets its input's statistics on the four sample photos at once, then the first side readout and the
fusion are fitted to the real u2netp's matte of one photo, as ±4 logits, on FIT_ROWS of its
positions drawn by the seed. Each recipe gets a file of its own (the fusion scaled and shifted
differently: other bytes, other mattes), so a recipe served from another recipe's file would show.

silueta's own network is not published (rembg's author reduced U²-Net to 44 MB): its stand-in is
U²-Net too. What the routes rely on is the file's contract, which they check on the real file when
they load it (craftai_infer.routes.u2netp_onnx).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from craftai_dev import stand_ins
from craftai_dev.cache import CACHE, exclusive

SEED = 0
VERSION = 5  # bump when what is made here changes: a new cache folder
INPUT = "input.1"
OUTPUTS = [f"d{i}" for i in range(7)]
CALIBRATION_PHOTO = "astronaut.png"
FIT_ROWS = 8_192  # of a readout's 320² positions, drawn by the seed (calibration.fit_readout's `rows`)
# recipe -> (scale, shift) of the fusion's logits: distinct files and mattes per recipe
VARIANTS: dict[str, tuple[float, float]] = {  # the first is the network as calibrated
    "u2net_human_seg": (1.0, 0.0),
    "silueta": (1.5, -0.6),
}


def photo_batch(names: list[str]) -> torch.Tensor:
    """The sample photos `names`, each as the pipeline feeds U²-Net (f32[1, 3, 320, 320]), stacked."""
    from PIL import Image

    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp

    arrays = []
    for name in names:
        rgb = np.asarray(Image.open(photos()[name]).convert("RGB"))
        arrays.append(matte_u2netp.preprocess(rgb).copy())
    return torch.from_numpy(np.concatenate(arrays))


def u2netp_subject(name: str) -> np.ndarray:
    """The real u2netp's matte of the sample photo `name` at 320² (rembg's pipeline), in [0, 1]: a
    subject and a background for a stand-in's readout to be fitted to."""
    from PIL import Image

    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp
    from craftai_models.onnx_sessions import open_session

    u2netp = open_session(u2netp_onnx(), "cpu")
    rgb = np.asarray(Image.open(photos()[name]).convert("RGB"))
    fused = u2netp.run(None, {u2netp.get_inputs()[0].name: matte_u2netp.preprocess(rgb)})[0]
    return matte_u2netp.postprocess(fused, (matte_u2netp.SIZE, matte_u2netp.SIZE)).astype(np.float32) / 255.0


def calibrated() -> torch.nn.Module:
    """U²-Net with random weights, calibrated on the sample photos (eval mode, CPU)."""
    from craftai_dev import calibration
    from craftai_dev.samples import PHOTOS
    from craftai_dev.u2net_reference import u2net_class

    torch.manual_seed(SEED)
    net = u2net_class()().eval()
    every = photo_batch(list(PHOTOS))
    one = photo_batch([CALIBRATION_PHOTO])
    calibration.calibrate_batchnorm(net, lambda: net(every), seed=SEED)
    target = torch.from_numpy(8.0 * (u2netp_subject(CALIBRATION_PHOTO) - 0.5))[None, None]

    def forward() -> object:
        return net(one)

    for name in ("side1", "outconv"):
        readout = readout_conv(net, name)
        features = calibration.readout_input(net, readout, forward)
        calibration.fit_readout(readout, features, target, rows=FIT_ROWS, seed=SEED)
    return net


def readout_conv(net: torch.nn.Module, name: str) -> torch.nn.Conv2d:
    """The convolution `name` of U²-Net (a side readout, or the fusion `outconv`)."""
    conv = net.get_submodule(name)
    assert isinstance(conv, torch.nn.Conv2d)
    return conv


def export(net: torch.nn.Module, path: Path) -> None:
    """`net` exported as rembg's U²-Net files are (see the module's docstring), atomically to `path`."""
    partial = path.with_suffix(".part")
    torch.onnx.export(
        net,
        (torch.zeros(1, 3, 320, 320),),
        str(partial),
        dynamo=False,  # the legacy TorchScript exporter: one file, no external data, as rembg's files
        export_params=True,
        opset_version=11,
        input_names=[INPUT],
        output_names=OUTPUTS,
        dynamic_axes={INPUT: {2: "height", 3: "width"}},
    )
    partial.replace(path)


def onnx_files() -> dict[str, Path]:
    """recipe -> its stand-in ONNX file (made once, then read from the cache)."""
    folder = CACHE / "fixtures" / f"u2net-family-{SEED}-{VERSION}"
    paths = {name: folder / f"{name}.onnx" for name in VARIANTS}
    if all(p.exists() for p in paths.values()):
        return paths
    with exclusive(folder.name):
        if all(p.exists() for p in paths.values()):
            return paths
        folder.mkdir(parents=True, exist_ok=True)
        first, *others = VARIANTS
        export(calibrated(), paths[first])
        for name in others:
            stand_ins.scaled_readout(paths[first], paths[name], "outconv", *VARIANTS[name])
    return paths
