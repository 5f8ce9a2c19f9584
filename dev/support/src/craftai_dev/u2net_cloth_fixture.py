"""A stand-in for rembg's u2net_cloth_seg.onnx, which cannot be had here: levindabhi's cloth
segmentation network, the authors' U²-Net with four output channels answering raw logits
(craftai_dev.u2net_reference's U2NET(3, 4), its fusion built for four classes as the authors'
file builds it, the sigmoids taken out of the exported graph),
with random weights, calibrated, exported as the u2net stand-ins are (craftai_dev.u2net_fixture:
input `input.1`, seven outputs, the fused logits f32[1, 4, H, W] first); cached under
<repo>/.cache/fixtures/.

Calibration, so that every test picture's class map is not trivial (each of the four classes wins
somewhere on each, with edges between them for Lanczos to ring on): every BatchNorm gets its
input's statistics on the four sample photos (craftai_dev.calibration), then the first side
readout (on one photo, FIT_ROWS of its positions) and the fusion (on all four) are fitted to a
made-up segmentation of each photo as ±4 logits: background where the real u2netp sees none, the
subject's top rows "upper", its bottom rows "lower", the rows between "full"
(tests/parity/test_u2net_cloth_rembg.py checks that rembg finds every part on every test picture).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from craftai_dev.cache import CACHE, exclusive
from craftai_dev.u2net_fixture import FIT_ROWS

SEED = 0
VERSION = 3  # bump when what is made here changes: a new cache folder
CALIBRATION_PHOTO = "astronaut.png"
RECIPE = "u2net_cloth_seg"
CLASSES = 4


def made_up_classes(subject: np.ndarray) -> np.ndarray:
    """(H, W) class ids from a matte in [0, 1]: 0 outside the subject; inside it, by row between the
    subject's first and last, 1 in the top 40 %, 2 in the bottom 30 %, 3 between."""
    inside = subject > 0.5
    rows = np.flatnonzero(inside.any(axis=1))
    top, bottom = (rows[0], rows[-1]) if rows.size else (0, subject.shape[0] - 1)
    where = (np.arange(subject.shape[0], dtype=np.float32) - top) / max(bottom - top, 1)
    by_row = np.where(where < 0.4, 1, np.where(where > 0.7, 2, 3))[:, None]
    return np.where(inside, by_row, 0).astype(np.int64)


def _target(names: list[str]) -> torch.Tensor:
    """±4 logits of each photo's made-up classes, the photos side by side: (1, CLASSES, 320, 320·n)."""
    from craftai_dev.u2net_fixture import u2netp_subject

    classes = np.concatenate([made_up_classes(u2netp_subject(name)) for name in names], axis=1)
    one_hot = np.stack([classes == c for c in range(CLASSES)]).astype(np.float32)
    return torch.from_numpy(8.0 * (one_hot - 0.5))[None]


def calibrated() -> torch.nn.Module:
    """U2NET(3, 4) with random weights, calibrated on the sample photos (eval mode, CPU)."""
    from craftai_dev import calibration
    from craftai_dev.samples import PHOTOS
    from craftai_dev.u2net_fixture import photo_batch, readout_conv
    from craftai_dev.u2net_reference import u2net_class

    torch.manual_seed(SEED)
    net = u2net_class()(3, CLASSES).eval()
    # backgroundremover's copy builds the fusion for one output channel (6 inputs); the authors'
    # file, and levindabhi's, build it for 6·out_ch: the side maps of every class
    net.outconv = torch.nn.Conv2d(6 * CLASSES, CLASSES, 1)
    names = list(PHOTOS)
    every = photo_batch(names)
    calibration.calibrate_batchnorm(net, lambda: net(every), seed=SEED)
    side1 = readout_conv(net, "side1")
    one = photo_batch([CALIBRATION_PHOTO])
    features = calibration.readout_input(net, side1, lambda: net(one))
    calibration.fit_readout(side1, features, _target([CALIBRATION_PHOTO]), rows=FIT_ROWS, seed=SEED)
    fusion = readout_conv(net, "outconv")
    features = calibration.readout_input(net, fusion, lambda: net(every))
    side_by_side = torch.cat(list(features), dim=-1)[None]  # a 1x1 convolution: the photos side by side
    calibration.fit_readout(fusion, side_by_side, _target(names))
    return net


def without_sigmoids(path: Path) -> None:
    """The graph at `path` answering each output's logits: a Sigmoid that makes an output is taken
    out (levindabhi's network returns logits where the authors' applies the sigmoid)."""
    import onnx

    model = onnx.load(str(path))
    outputs = {o.name for o in model.graph.output}
    for node in [n for n in model.graph.node if n.op_type == "Sigmoid" and n.output[0] in outputs]:
        (source,) = node.input
        for other in model.graph.node:
            other.output[:] = [node.output[0] if name == source else name for name in other.output]
            if other is not node:
                other.input[:] = [node.output[0] if name == source else name for name in other.input]
        model.graph.node.remove(node)
    onnx.save(model, str(path))


def onnx_file() -> Path:
    """The stand-in ONNX file (made once, then read from the cache)."""
    from craftai_dev.u2net_fixture import export

    folder = CACHE / "fixtures" / f"u2net-cloth-{SEED}-{VERSION}"
    path = folder / f"{RECIPE}.onnx"
    if path.exists():
        return path
    with exclusive(folder.name):
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".made")
            with torch.no_grad():
                export(calibrated(), partial)
            without_sigmoids(partial)
            partial.replace(path)
    return path
