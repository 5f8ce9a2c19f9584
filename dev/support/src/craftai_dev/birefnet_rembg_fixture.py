"""Stand-ins for rembg's BiRefNet files (birefnet-general, -portrait, -dis, -hrsod, -cod, -massive,
and bria-rmbg), which cannot be had here: the calibrated BiRefNet_lite graph of
craftai_dev.birefnet_fixture (this project's network, proven against nobg's reference, exported
with the published contract: `input_image` f32[1, 3, 1024, 1024] in, `output_image` logits
f32[1, 1, 1024, 1024] out), one file per recipe, its last convolution scaled and shifted so that
each recipe's bytes and mattes are its own; bria-rmbg's with the sigmoid inside the graph, as BRIA's
published graph answers it; cached under <repo>/.cache/fixtures/.

Swin-T, not the published Swin-L: what the route and rembg do around a graph is the same for every
graph of the contract, and a Swin-L stand-in would be a 0.9 GB file taking ~30 s a picture on two
cores (docs/research/weights.md).
"""

from __future__ import annotations

from pathlib import Path

from craftai_dev import stand_ins
from craftai_dev.cache import CACHE, exclusive

VERSION = 2  # bump when what is made here changes: a new cache folder
READOUT = "decoder.conv_out1.0"
# recipe -> (scale, shift) of the logits: the first is the calibrated graph as exported
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
        for name, path in paths.items():
            if not path.exists():
                stand_ins.scaled_readout(base, path, READOUT, *VARIANTS[name], sigmoid=name in SIGMOID_INSIDE)
    return paths
