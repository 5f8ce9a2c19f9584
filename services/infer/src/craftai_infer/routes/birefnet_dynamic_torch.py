"""BiRefNet_dynamic for image.matte on torch: the Swin-L network written in this project
(craftai_models.birefnet) from its prepared folder (the author's safetensors file as published, its
configuration, floats and patch order recorded: craftai_prepare's birefnet converter; no ONNX of this
checkpoint is published, so its order is the recipe's, dated from its release), run at each
picture's own size (craftai_infer.pipelines.matte_birefnet_dynamic)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from craftai_infer.pipelines import matte_birefnet
from craftai_infer.pipelines.matte_birefnet_dynamic import input_size, matte_birefnet_dynamic
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import MatteRoute, RouteFiles, Step
from craftai_infer.routes.birefnet_torch import load_prepared, network_bytes


class BirefnetDynamicTorch(MatteRoute):
    """One picture a forward at its own input size, on either device: the inputs differ in shape
    from picture to picture, so there are no batches and no CUDA graphs (eager kernels, BatchNorm
    folded, autocast only where CRAFTAI_GPU_PRECISION asks). Each picture's working memory is
    admitted on the CPU from the size its input will have (`working_bytes`)."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        self.network, prepared, self.autocast = load_prepared(files, device)
        self.device = device
        self.architecture = prepared.architecture

    def warm_up(self, step: Step) -> None:
        """Nothing is captured: every input size runs the same eager kernels."""

    def working_bytes(self, height: int, width: int) -> int:
        """On the CPU: the pipeline's memory for the picture and the network's activations at the
        picture's input size (nothing of either on a GPU's host side)."""
        if self.device != "cpu":
            return 0
        return matte_birefnet.input_bytes(height, width) + network_bytes(self.architecture, *input_size(height, width))

    def matte(self, pictures: Sequence[Picture]) -> list[torch.Tensor]:
        """(H, W) uint8 tensors on this route's device: the outputs are made there (routes.MATTE)."""
        return [matte_birefnet_dynamic(p, self.network, device=self.device, autocast=self.autocast) for p in pictures]
