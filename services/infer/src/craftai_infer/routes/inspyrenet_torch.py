"""InSPyReNet Swin-B for image.matte on torch: the network written in this project
(craftai_models.inspyrenet), weights read from the pinned safetensors file as downloaded (no
preparation; the loader has hashed it), the any-size pipeline of docs/MATTE.md
(craftai_infer.pipelines.matte_inspyrenet)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from craftai_infer.engines.cuda_graphs import ChannelsLastGraphs
from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines import matte_inspyrenet
from craftai_infer.pipelines.matte_inspyrenet import matte_inspyrenet_batch, network_shape
from craftai_infer.pipelines.matte_spec import Matte
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.picture_convert import over_white
from craftai_infer.routes import MATTE, Capabilities, MatteRoute, ModelRefusedError, RouteFiles, Step
from craftai_models.checkpoints import CheckpointRefusedError
from craftai_models.inspyrenet import fold_batchnorm, load_inspyrenet

# bf16 autocast on the GPU unless CRAFTAI_GPU_PRECISION says otherwise (docs/PERFORMANCE.md says why).
GPU_DEFAULT = torch.bfloat16
PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


# The network's peak working memory on the CPU: a part that does not depend on the picture, and a
# part per pixel of its input (Swin-B's activations; measured 0.47, 0.99 and 3.1 GiB at 320x240,
# 640x480 and 1280x960: tools/bench/working_memory.py, docs/SECURITY.md "Memory").
NETWORK_FIXED_BYTES = 320 << 20
NETWORK_BYTES_PER_INPUT_PIXEL = 2560


class InspyrenetTorch(MatteRoute):
    """On a GPU: BatchNorm folded into the convs, channels-last, autocast, and one CUDA graph per input
    shape (1280² for every picture over 1280 px); on the CPU: the network as loaded, fp32. Pictures
    whose network inputs have the same shape share a forward."""

    capabilities = Capabilities(batched=frozenset({MATTE}))

    def __init__(self, files: RouteFiles, device: str) -> None:
        try:
            self.network = load_inspyrenet(files.role("weights"), device=device)
        except CheckpointRefusedError as exc:
            raise ModelRefusedError(str(exc)) from exc
        self.device = device
        on_gpu = device.startswith("cuda")
        precision = files.gpu_precision
        self.autocast = (PRECISIONS[precision] if precision != "auto" else GPU_DEFAULT) if on_gpu else None
        self._graphs: ChannelsLastGraphs | None = None
        self._staging = HostStaging(torch.device(device))
        if on_gpu:
            self.capabilities = dataclasses.replace(self.capabilities, pinned_pictures=True)
            fold_batchnorm(self.network)
            self._graphs = ChannelsLastGraphs(self.network, torch.device(device), capacity=6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network on a normalised (N, 3, H, W) input, replayed from a CUDA graph on a GPU."""
        if self._graphs is None:
            out: torch.Tensor = self.network(x)
            return out
        return self._graphs(x)

    def warm_up(self, step: Step) -> None:
        """Capture the graph every picture over 1280 px uses (no-op on the CPU)."""
        if self._graphs is not None:
            step("capturing the network's CUDA graph at 1280²")
            self.matte([np.zeros((1200, 1600, 3), np.uint8)])

    def batch_key(self, picture: Picture) -> Hashable:
        return network_shape(picture.shape[0], picture.shape[1])

    def working_bytes(self, height: int, width: int) -> int:
        """On the CPU: the pipeline's memory for the picture, and the network's activations, which
        grow with its input (~3.2 GiB at 1280x960; nothing of either on a GPU's host side)."""
        if self.device != "cpu":
            return 0
        rows, columns = network_shape(height, width)
        network = NETWORK_FIXED_BYTES + NETWORK_BYTES_PER_INPUT_PIXEL * rows * columns
        return matte_inspyrenet.input_bytes(height, width) + network

    def matte(self, pictures: Sequence[Picture]) -> Sequence[Matte]:
        """(H, W) uint8 tensors on this route's device: the outputs are made there (routes.MATTE)."""
        with torch.inference_mode():
            return matte_inspyrenet_batch(
                [over_white(p) for p in pictures],
                self.forward,
                device=self.device,
                autocast=self.autocast,
                upload=self._staging.upload,
            )
