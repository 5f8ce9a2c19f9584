"""rembg's IS-Net recipes for image.matte on torch (isnet-general-use, isnet-anime): the network
written in this project (craftai_models.isnet), weights from the prepared folder (converted once from
the published ONNX: craftai_prepare.converters.isnet), and the onnxruntime route's pipeline
(craftai_infer.pipelines.matte_u2netp with the recipe's `Steps`): u2netp's torch route with IS-Net
in it."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.matte_spec import Matte
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import Capabilities, RouteFiles
from craftai_infer.routes.isnet_onnx import cpu_working_bytes
from craftai_infer.routes.u2netp_torch import U2netpTorch
from craftai_models.isnet import WEIGHTS, WEIGHTS_ANIME, IsNet


class IsnetTorch(U2netpTorch):
    """isnet-general-use (the DIS authors' IS-Net, its six side maps; the first is served). On a GPU
    any pictures share a forward (each is 1024² for the network); on the CPU one picture a forward,
    whose working memory is admitted per request (`working_bytes`), as the onnxruntime route's."""

    weights = WEIGHTS
    steps = matte_u2netp.ISNET
    sides = 6  # the side outputs the prepared weights hold

    def __init__(self, files: RouteFiles, device: str) -> None:
        super().__init__(files, device)
        if device == "cpu":
            self.capabilities = Capabilities()

    def network(self) -> nn.Module:
        return IsNet(self.sides)

    def matte(self, pictures: Sequence[Picture]) -> list[Matte]:
        """On the CPU one forward per picture even when handed several (e.g. a batch formed on the
        GPU before a fallback to the CPU): memory stays that of one 1024² forward."""
        if self.device != "cpu":
            return super().matte(pictures)
        mattes: list[Matte] = []
        for picture in pictures:
            mattes += super().matte([picture])
        return mattes

    def working_bytes(self, height: int, width: int) -> int:
        return cpu_working_bytes(self.device, self.steps)


class IsnetAnimeTorch(IsnetTorch):
    """isnet-anime (SkyTNT's IS-Net): its published graph answers side 1 alone, and rembg normalises
    with ImageNet's mean and no scaling."""

    weights = WEIGHTS_ANIME
    steps = matte_u2netp.ISNET_ANIME
    sides = 1
