"""rembg's Swin-L BiRefNet recipes for image.matte on torch (birefnet-general, birefnet-portrait, birefnet-cod): the
network written in this project (craftai_models.birefnet) from the prepared folder of the author's
published safetensors file (its configuration, floats and patch order recorded, proven against the
recipe's ONNX where that was on disk: craftai_prepare's birefnet converter), with rembg's steps for
its BiRefNet sessions around it (craftai_infer.pipelines.matte_u2netp `BIREFNET`), as the onnxruntime
route runs them around the published graph: the same matte up to the engines' arithmetic. On a
GPU the steps run there once checked there as the route loads (as u2netp's torch route does:
pipelines/matte_u2netp_torch.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch

from craftai_infer.engines.cuda_graphs import NetworkGraphs
from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines import matte_u2netp, matte_u2netp_torch
from craftai_infer.pipelines.matte_spec import Matte
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import MATTE, Capabilities, MatteRoute, ModelRefusedError, RouteFiles, Step
from craftai_infer.routes.birefnet_torch import batch_bound, load_prepared, network_bytes
from craftai_infer.routes.isnet_onnx import cpu_working_bytes


class BirefnetRembgTorch(MatteRoute):
    """On a GPU: BatchNorm folded, CUDA graphs per batch size (every picture is a 1024² input, so
    any pictures batch, up to `batch_bound`), autocast only where CRAFTAI_GPU_PRECISION asks. On the
    CPU: fp32, one picture a forward, its working memory admitted per request (`working_bytes`)."""

    steps = matte_u2netp.BIREFNET

    def __init__(self, files: RouteFiles, device: str) -> None:
        self.network, prepared, self.autocast = load_prepared(files, device)
        if prepared.side != self.steps.size:
            raise ModelRefusedError(
                f"the prepared checkpoint takes {prepared.side}² pictures; rembg's steps for this recipe "
                f"feed {self.steps.size}²: the recipe data's input_side must be {self.steps.size}"
            )
        self.device = device
        self.host = files.host
        self.architecture = prepared.architecture
        self._graphs: NetworkGraphs | None = None
        self.forward: torch.nn.Module | NetworkGraphs = self.network
        if device.startswith("cuda"):
            bound = batch_bound(prepared.architecture, prepared.side)
            self._graphs = self.forward = NetworkGraphs(self.network, torch.device(device), capacity=bound)
            self.capabilities = Capabilities(batched=frozenset({MATTE}), max_batch={MATTE: bound})
        self.steps_on_device = False  # on a GPU, `warm_up` checks the steps there and decides
        self._staging: HostStaging | None = None
        if self._graphs is not None:
            self._staging = HostStaging(torch.device(device))
            self.capabilities = dataclasses.replace(self.capabilities, pinned_pictures=True)

    def warm_up(self, step: Step) -> None:
        """Capture the graph of one picture, then check rembg's steps on the GPU against Pillow's
        and numpy's and use them where equal (no-op on the CPU)."""
        if self._graphs is not None:
            step(f"capturing the network's CUDA graph at {self.steps.size}²")
            self.matte([np.zeros((64, 64, 3), np.uint8)])
            self.steps_on_device = matte_u2netp_torch.usable_on(self.device, self.steps, step, type(self).__name__)

    def working_bytes(self, height: int, width: int) -> int:
        return cpu_working_bytes(
            self.device, self.steps, network_bytes(self.architecture, self.steps.size, self.steps.size)
        )

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        autocast = self.autocast
        with torch.inference_mode(), torch.autocast(x.device.type, dtype=autocast, enabled=autocast is not None):
            return self.forward(x)

    def _logits(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        logits = self._forward(torch.from_numpy(batch).to(self.device))
        return np.asarray(logits.float().cpu().numpy(), dtype=np.float32)

    def matte(self, pictures: Sequence[Picture]) -> list[Matte]:
        """On the GPU where the steps are, tensors there; else host arrays, rembg's steps Pillow's.
        On the CPU one forward per picture even when handed several (e.g. a batch formed on the GPU
        before a fallback to the CPU)."""
        if self.steps_on_device and self._staging is not None:
            x = matte_u2netp_torch.preprocess_torch([self._staging.upload(p) for p in pictures], self.steps)
            sizes = [(p.shape[1], p.shape[0]) for p in pictures]
            return list(matte_u2netp_torch.postprocess_torch(self._forward(x), sizes, self.steps))
        groups = [list(pictures)] if self._graphs is not None else [[p] for p in pictures]
        mattes: list[Matte] = []
        for group in groups:
            logits = self._logits(matte_u2netp.preprocess_all(group, self.steps, self.host))
            mattes += matte_u2netp.postprocess_all(logits, group, self.steps, self.host)
        return mattes
