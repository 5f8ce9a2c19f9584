"""U²-Net for image.matte on torch (u2netp; u2net and u2net_human_seg at the full widths): the
network written in this project (craftai_models.u2netp), weights from the prepared folder (converted
once from the published ONNX), the same rembg-compatible pipeline as the onnxruntime route; IS-Net's
route (routes/isnet_torch.py) is this one with its network and rembg's steps for it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
from safetensors.torch import load_file
from torch import nn

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import MATTE, Capabilities, MatteRoute, RouteFiles
from craftai_models.u2netp import FULL, PORTABLE, WEIGHTS, WEIGHTS_FULL, U2Net, Widths


class U2netpTorch(MatteRoute):
    """Loads only the prepared weights (the loader has checked the manifest); never the ONNX file.
    Every picture is 320² for the network, so any pictures share a forward."""

    capabilities = Capabilities(batched=frozenset({MATTE}))
    widths: Widths = PORTABLE
    weights: str = WEIGHTS
    steps: matte_u2netp.Steps = matte_u2netp.U2NET  # what rembg's session of the recipe does around it

    def __init__(self, files: RouteFiles, device: str) -> None:
        assert files.prepared is not None
        self.device = device
        self.host = files.host
        module = self.network()
        module.load_state_dict(load_file(str(files.prepared / self.weights)), strict=True)
        self.module = module.eval().to(device)

    def network(self) -> nn.Module:
        """The module the prepared weights load into (strict); its first output is the served map."""
        return U2Net(self.widths)

    def matte(self, pictures: Sequence[Picture]) -> list[npt.NDArray[np.uint8]]:
        """Host arrays: the pipeline's pre- and post-processing are Pillow's (rembg's), on the host
        threads for a batch."""
        batch = matte_u2netp.preprocess_all(pictures, self.steps, self.host)
        x = torch.from_numpy(batch).to(self.device)
        with torch.inference_mode():
            first = self.module(x)[0].float().cpu().numpy()
        return matte_u2netp.postprocess_all(first, pictures, self.steps, self.host)


class U2netTorch(U2netpTorch):
    """U²-Net at the full widths (u2net, u2net_human_seg): the weights its preparation wrote
    (craftai_prepare.converters.u2netp `U2NET`)."""

    widths = FULL
    weights = WEIGHTS_FULL
