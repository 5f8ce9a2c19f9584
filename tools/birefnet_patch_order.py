"""Which patch order the published BiRefNet_lite weights go with, decided by the published files
themselves (run it once they are at hand: they cannot be downloaded on the development machines).

    .venv/bin/python tools/birefnet_patch_order.py --weights STORE/models/birefnet-lite/model.safetensors \\
        --onnx STORE/models/birefnet-lite/BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx [--photo PICTURE]

The published ONNX graph was exported in August 2024, before ZhengPeng7/BiRefNet 5198d3f changed
how the picture is split into patches (docs/MATTE.md, "Patch order"), and is the same model as
the safetensors file. This runs this project's network in both orders on a photo at 1024² and
compares each with the graph's logits: the order the weights were trained with matches to float
rounding, the other one does not. It prints both errors and the verdict; craftai_models.birefnet's
TRAINED_ORDER must be the one it names (exit status 1 when it is not).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from craftai_models.birefnet import TRAINED_ORDER, PatchOrder, load_birefnet
from craftai_models.onnx_sessions import open_session


def photo_input(path: Path | None) -> torch.Tensor:
    from PIL import Image

    from craftai_infer.pipelines.matte_birefnet import network_input
    from tools.samples import photos

    picture = Image.open(path if path is not None else photos()["astronaut.png"]).convert("RGB")
    return network_input(torch.from_numpy(np.array(picture)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, required=True, help="the pinned model.safetensors")
    parser.add_argument("--onnx", type=Path, required=True, help="the pinned BiRefNet-general-...-epoch_232.onnx")
    parser.add_argument("--photo", type=Path, default=None, help="any photo (default: scikit-image's astronaut)")
    args = parser.parse_args(argv)
    x = photo_input(args.photo)
    session = open_session(args.onnx)
    (graph,) = session.get_inputs()
    reference = torch.from_numpy(session.run(None, {graph.name: x.numpy()})[0])
    scale = float(reference.abs().max())
    errors = {}
    for order in PatchOrder:
        with torch.inference_mode():
            logits = load_birefnet(args.weights, order=order)(x)
        errors[order] = float((logits - reference).abs().max()) / scale
        print(f"{order.value:14s} max |torch - onnx| / max |onnx| = {errors[order]:.2e}")
    best = min(errors, key=lambda o: errors[o])
    print(f"the weights go with the {best.value} order; craftai_models.birefnet.TRAINED_ORDER is {TRAINED_ORDER.value}")
    return 0 if best is TRAINED_ORDER and errors[best] < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
