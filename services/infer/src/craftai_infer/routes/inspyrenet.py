"""InSPyReNet Swin-B for image.matte: the network written in this project, weights read from the
pinned safetensors file as downloaded (no preparation), the any-size pipeline of DESIGN.md 5."""

from __future__ import annotations

import torch
from PIL import Image

from craftai_infer.models.inspyrenet import CheckpointRefusedError, PinnedFile, load_inspyrenet
from craftai_infer.pipelines.matte_inspyrenet import matte_inspyrenet
from craftai_infer.pipelines.picture_convert import to_rgb_uint8
from craftai_infer.routes import ModelRefusedError, RouteFiles

# Autocast on the GPU unless CRAFTAI_GPU_PRECISION says otherwise (tolerance: docs/MATTE.md).
GPU_DEFAULT = torch.float16
PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class InspyrenetTorch:
    def __init__(self, files: RouteFiles, device: str) -> None:
        pin = files.pins["weights"]
        try:
            self.network = load_inspyrenet(
                files.role("weights"), PinnedFile(pin.name, pin.size, pin.sha256), device=device
            )
        except CheckpointRefusedError as exc:
            raise ModelRefusedError(str(exc)) from exc
        self.device = device
        on_gpu = device.startswith("cuda")
        precision = files.gpu_precision
        self.autocast = (PRECISIONS[precision] if precision != "auto" else GPU_DEFAULT) if on_gpu else None

    def matte(self, picture: Image.Image) -> Image.Image:
        with torch.inference_mode():
            matte = matte_inspyrenet(to_rgb_uint8(picture), self.network, device=self.device, autocast=self.autocast)
        return Image.fromarray(matte, mode="L")
