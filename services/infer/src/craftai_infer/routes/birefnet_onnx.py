"""BiRefNet_lite for image.matte on onnxruntime: the published ONNX graph run as published (CUDA
provider when a GPU answers), the pipeline shared with the torch route
(craftai_infer.pipelines.matte_birefnet) around it on the CPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch

from craftai_infer.engines.onnxruntime import OnnxModel
from craftai_infer.pipelines import matte_birefnet
from craftai_infer.pipelines.matte_birefnet import BirefnetSettings, matte_birefnet_batch
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.picture_convert import over_white
from craftai_infer.routes import MatteRoute, ModelRefusedError, RouteFiles, birefnet_rembg_onnx


def _square_side(shape: Sequence[object]) -> int:
    """The side of a (1, 3, S, S) input; a graph with other dimensions is not this recipe's."""
    if len(shape) != 4 or shape[1] != 3 or shape[2] != shape[3] or not isinstance(shape[2], int):
        raise ModelRefusedError(f"the graph's input is {list(shape)}, not BiRefNet's (1, 3, S, S) picture")
    return shape[2]


def _check_logits(shape: Sequence[object], side: int) -> None:
    """The first output must be the matte's logits at the input's side, (1, 1, S, S): the published
    graphs answer them first (a dimension the graph leaves unnamed is taken on trust)."""
    expected = (1, 1, side, side)
    if len(shape) != 4 or any(isinstance(d, int) and d != e for d, e in zip(shape, expected, strict=True)):
        raise ModelRefusedError(f"the graph's first output is {list(shape)}, not BiRefNet's logits {list(expected)}")


class BirefnetOnnx(MatteRoute):
    """The published graph takes one 1024² picture at a time; the network side is read from the
    graph's own input."""

    network_bytes = matte_birefnet.NETWORK_BYTES  # its activations on the CPU at its input size

    def __init__(self, files: RouteFiles, device: str) -> None:
        # the working memory admitted per request (`working_bytes`) is given back after each picture
        self.model = OnnxModel(files.role("network"), device, files.cpu_threads, shrink_cpu_arena=True)
        self.device = self.model.device
        inputs = self.model.session.get_inputs()
        if len(inputs) != 1:
            raise ModelRefusedError(f"the graph has {len(inputs)} inputs; BiRefNet's has one picture")
        self.input_name = inputs[0].name
        side = _square_side(inputs[0].shape)
        _check_logits(self.model.session.get_outputs()[0].shape, side)
        self.settings = BirefnetSettings(size=side)

    def _network(self, x: torch.Tensor) -> torch.Tensor:
        (logits, *_rest) = self.model.run({self.input_name: np.ascontiguousarray(x.numpy(), dtype=np.float32)})
        return torch.from_numpy(logits)

    def working_bytes(self, height: int, width: int) -> int:
        """On the CPU: the pipeline's memory for the picture, and the network's activations at its
        input (nothing of either on a GPU's host side)."""
        return matte_birefnet.input_bytes(height, width) + self.network_bytes if self.device == "cpu" else 0

    def matte(self, pictures: Sequence[Picture]) -> list[npt.NDArray[np.uint8]]:
        """Host arrays (views of the CPU tensors the pipeline made around the session, no copy): the
        outputs are made from them on the route's device (routes.MATTE)."""
        return [self._matte(p).numpy() for p in pictures]

    def _matte(self, picture: Picture) -> torch.Tensor:
        (matte,) = matte_birefnet_batch([over_white(picture)], self._network, settings=self.settings)
        return matte


class BirefnetHrOnnx(BirefnetOnnx):
    """BiRefNet_HR: the same steps at the graph's 2048² input. Its activations on the CPU are not
    measured (no Swin-L graph at 2048² can be made here in reasonable time): rembg's Swin-L graphs
    hold 3 GiB at 1024² (birefnet_rembg_onnx), and activations grow with the input's pixels."""

    network_bytes = 4 * birefnet_rembg_onnx.NETWORK_BYTES
