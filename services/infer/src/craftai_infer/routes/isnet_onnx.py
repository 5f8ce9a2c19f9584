"""rembg's IS-Net files for image.matte on onnxruntime (isnet-general-use, isnet-anime): the published
ONNX run as published, with rembg's pipeline for its DIS sessions (craftai_infer.pipelines
.matte_u2netp at 1024², `ISNET` and `ISNET_ANIME`): the same steps as its U²-Net sessions, another
size and normalisation. Each file's contract (one 1024² picture in, the sigmoid map first out) is
checked when the route loads it."""

from __future__ import annotations

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.routes.u2netp_onnx import U2netpOnnx

# onnxruntime's working memory for one picture on the CPU, measured on both reference networks at
# 1024² (0.44 and 0.62 GB above the loaded session: docs/API.md, "image.matte with
# isnet-general-use and isnet-anime"), rounded up; torch's at 1024² (the torch route) is 0.65 GB.
NETWORK_BYTES = 700 * 2**20


def cpu_working_bytes(device: str, steps: matte_u2netp.Steps, network_bytes: int = NETWORK_BYTES) -> int:
    """On the CPU: the pre-processing's arrays and the network's activations (none on a GPU's host side)."""
    if device != "cpu":
        return 0
    return steps.size * steps.size * 3 * (8 + 4) + network_bytes


class IsnetOnnx(U2netpOnnx):
    """isnet-general-use (the DIS authors' IS-Net): byte-identical to rembg's matte on the same file.
    One picture at a time on the CPU: the network at 1024² keeps every core busy; its working memory
    given back after each picture (admitted per request: `working_bytes`)."""

    steps = matte_u2netp.ISNET
    cpu_concurrent_runs = 1
    shrink_cpu_arena = True
    network_bytes = NETWORK_BYTES

    def working_bytes(self, height: int, width: int) -> int:
        return cpu_working_bytes(self.device, self.steps, self.network_bytes)


class IsnetAnimeOnnx(IsnetOnnx):
    """isnet-anime (SkyTNT's IS-Net for anime characters): rembg normalises its pictures with
    ImageNet's mean and no scaling."""

    steps = matte_u2netp.ISNET_ANIME
