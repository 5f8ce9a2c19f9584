"""BiRefNet for image.matte on torch (BiRefNet_lite at 1024², BiRefNet_HR's Swin-L at 2048²): the
network written in this project (craftai_models.birefnet), from its prepared folder: the published
safetensors file as downloaded (the loader has hashed it against the manifest), its configuration,
its input side and the patch order it is read with, which the preparation proved against the
published ONNX where that file was on disk and the proof fitted (craftai_prepare's birefnet
converter); the pipeline shared with the onnxruntime routes (craftai_infer.pipelines.matte_birefnet)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np
import torch

from craftai_infer.engines.cuda_graphs import ChannelsLastGraphs, NetworkGraphs
from craftai_infer.engines.precision import autocast_dtype
from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines import matte_birefnet
from craftai_infer.pipelines.matte_birefnet import BirefnetSettings, matte_birefnet_batch
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.picture_convert import over_white
from craftai_infer.routes import (
    MATTE,
    Capabilities,
    MatteRoute,
    ModelRefusedError,
    RouteFiles,
    Step,
    birefnet_rembg_onnx,
)
from craftai_models.birefnet import (
    PREPARED_SETTINGS,
    PREPARED_WEIGHTS,
    TRAINED_SIDE,
    Architecture,
    BiRefNet,
    Prepared,
    fold_batchnorm,
    load_birefnet,
    read_prepared,
)
from craftai_models.checkpoints import CheckpointRefusedError

# fp32 on the GPU unless CRAFTAI_GPU_PRECISION asks for autocast: bf16 moved the calibrated
# random-weight matte visibly (its edges and its >0.5 mask); a reduced default waits for the real
# weights to show it keeps the matte (docs/PERFORMANCE.md, "BiRefNet_lite").
GPU_DEFAULT: torch.dtype | None = None

#: A call on a GPU takes up to this many BiRefNet_lite inputs at 1024²; a larger network or input
#: takes proportionally fewer (at least one): the graphs' activations grow with both.
LITE_BATCH = 8


def batch_bound(architecture: Architecture, side: int) -> int:
    """How many pictures one call on a GPU takes: BiRefNet_lite's batch at 1024², scaled down by the
    input's pixels and, for Swin-L (twice the widths), by four."""
    widths = 1 if architecture is Architecture.LITE else 4
    return max(1, LITE_BATCH * TRAINED_SIDE**2 // (side**2 * widths))


def network_bytes(architecture: Architecture, height: int, width: int) -> int:
    """The network's peak working memory on the CPU for one input of height x width: measured for
    BiRefNet_lite at 1024² (matte_birefnet.NETWORK_BYTES); for Swin-L, the measure of rembg's Swin-L
    graphs at 1024² (birefnet_rembg_onnx), an estimate for torch; both grow with the input's pixels."""
    at_1024 = matte_birefnet.NETWORK_BYTES if architecture is Architecture.LITE else birefnet_rembg_onnx.NETWORK_BYTES
    return at_1024 * height * width // TRAINED_SIDE**2


def load_prepared(files: RouteFiles, device: str) -> tuple[BiRefNet, Prepared, torch.dtype | None]:
    """The network of a prepared folder, read as its record says (order, configuration, floats), on
    `device`, and the precision its forwards autocast to (None: fp32). On a GPU its BatchNorm is
    folded into the convolutions and the precision is CRAFTAI_GPU_PRECISION's (GPU_DEFAULT unless
    set). ModelRefusedError in plain words for a folder that does not hold what it records."""
    assert files.prepared is not None
    try:
        prepared = read_prepared(files.prepared / PREPARED_SETTINGS)
        network = load_birefnet(
            files.prepared / PREPARED_WEIGHTS,
            device=device,
            order=prepared.order,
            architecture=prepared.architecture,
            floats=prepared.stored,
        )
    except (CheckpointRefusedError, ValueError) as exc:
        raise ModelRefusedError(str(exc)) from exc
    autocast = None
    if device.startswith("cuda"):
        autocast = autocast_dtype(files.gpu_precision, GPU_DEFAULT)
        fold_batchnorm(network)
    return network, prepared, autocast


class BirefnetTorch(MatteRoute):
    """On a GPU: BatchNorm folded into the convs, channels-last (lite), autocast, one CUDA graph per batch
    size (every picture is an input of the network's side, so any pictures batch together, up to
    `batch_bound`). On the CPU: the network as loaded, fp32, one picture per call (a 1024² forward
    of the lite network holds about a gigabyte of activations; a batch would hold as many)."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        self.network, prepared, self.autocast = load_prepared(files, device)
        self.device = device
        self.architecture = prepared.architecture
        self.settings = BirefnetSettings(size=prepared.side)
        self._staging = HostStaging(torch.device(device))
        self._graphs: NetworkGraphs | None = None
        # Logits of a normalised (N, 3, 1024, 1024) input: the network, or on a GPU its CUDA graphs.
        self.forward: Callable[[torch.Tensor], torch.Tensor] = self.network
        if device.startswith("cuda"):
            bound = batch_bound(prepared.architecture, prepared.side)
            # channels-last for the lite network's convolutions; Swin-L's backbone (most of its work) reads
            # tokens, and the layout change cost it 15% at 2048² (docs/PERFORMANCE.md, "BiRefNet_HR")
            graphs = ChannelsLastGraphs if prepared.architecture is Architecture.LITE else NetworkGraphs
            self._graphs = self.forward = graphs(self.network, torch.device(device), capacity=bound)
            self.capabilities = Capabilities(batched=frozenset({MATTE}), max_batch={MATTE: bound}, pinned_pictures=True)

    def warm_up(self, step: Step) -> None:
        """Capture the graph of one picture (no-op on the CPU)."""
        if self._graphs is not None:
            step(f"capturing the network's CUDA graph at {self.settings.size}²")
            self.matte([np.zeros((64, 64, 3), np.uint8)])

    def batch_key(self, picture: Picture) -> Hashable:
        return self.settings.size

    def working_bytes(self, height: int, width: int) -> int:
        """On the CPU: the pipeline's memory for the picture, and the network's activations at its
        input side (nothing of either on a GPU's host side)."""
        if self.device != "cpu":
            return 0
        return matte_birefnet.input_bytes(height, width) + network_bytes(
            self.architecture, self.settings.size, self.settings.size
        )

    def matte(self, pictures: Sequence[Picture]) -> list[torch.Tensor]:
        """(H, W) uint8 tensors on this route's device: the outputs are made there (routes.MATTE)."""
        # On the CPU one forward per picture even when handed several (e.g. a batch formed on the
        # GPU before a fallback to the CPU): memory stays that of one 1024² forward.
        groups = [list(pictures)] if self._graphs is not None else [[p] for p in pictures]
        with torch.inference_mode():
            return [
                matte
                for group in groups
                for matte in matte_birefnet_batch(
                    [over_white(p) for p in group],
                    self.forward,
                    device=self.device,
                    autocast=self.autocast,
                    settings=self.settings,
                    upload=self._staging.upload,
                )
            ]
