"""U²-Net for image.matte on torch (u2netp; u2net and u2net_human_seg at the full widths): the
network written in this project (craftai_models.u2netp), weights from the prepared folder (converted
once from the published ONNX), the same rembg-compatible pipeline as the onnxruntime route; IS-Net's
route (routes/isnet_torch.py) is this one with its network and rembg's steps for it.

On a GPU the steps run there too (pipelines/matte_u2netp_torch.py: Pillow's Lanczos and rembg's
arithmetic restated bit for bit), once the route has checked them on its device as it loads
(`warm_up`); where they differ it says so in the log and keeps Pillow's resizes on the host."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from safetensors.torch import load_file
from torch import nn

from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines import matte_u2netp, matte_u2netp_torch
from craftai_infer.pipelines.matte_spec import Matte
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import MATTE, Capabilities, MatteRoute, RouteFiles, Step
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
        self.steps_on_device = False  # on a GPU, `warm_up` checks the steps there and decides
        self._staging: HostStaging | None = None
        if device != "cpu":
            self._staging = HostStaging(torch.device(device))
            self.capabilities = dataclasses.replace(self.capabilities, pinned_pictures=True)

    def warm_up(self, step: Step) -> None:
        """On a GPU: rembg's steps checked there against Pillow's and numpy's, used where equal."""
        if self._staging is None:
            return
        self.steps_on_device = matte_u2netp_torch.usable_on(self.device, self.steps, step, type(self).__name__)

    def network(self) -> nn.Module:
        """The module the prepared weights load into (strict); its first output is the served map."""
        return U2Net(self.widths)

    def matte(self, pictures: Sequence[Picture]) -> list[Matte]:
        """On the device where the steps are (tensors there); else host arrays, the steps Pillow's
        (rembg's) on the host threads for a batch."""
        if self.steps_on_device and self._staging is not None:
            return self._matte_on_device(pictures, self._staging)
        batch = matte_u2netp.preprocess_all(pictures, self.steps, self.host)
        x = torch.from_numpy(batch).to(self.device)
        with torch.inference_mode():
            first = self.module(x)[0].float().cpu().numpy()
        return list(matte_u2netp.postprocess_all(first, pictures, self.steps, self.host))

    def _matte_on_device(self, pictures: Sequence[Picture], staging: HostStaging) -> list[Matte]:
        tensors = [staging.upload(p) for p in pictures]
        x = matte_u2netp_torch.preprocess_torch(tensors, self.steps)
        with torch.inference_mode():
            first = self.module(x)[0]
        sizes = [(p.shape[1], p.shape[0]) for p in pictures]
        return list(matte_u2netp_torch.postprocess_torch(first, sizes, self.steps))


class U2netTorch(U2netpTorch):
    """U²-Net at the full widths (u2net, u2net_human_seg): the weights its preparation wrote
    (craftai_prepare.converters.u2netp `U2NET`)."""

    widths = FULL
    weights = WEIGHTS_FULL
