"""rembg's BiRefNet files for image.matte on onnxruntime (birefnet-general, -portrait, -dis, -hrsod,
-cod, -massive: BiRefNet with a Swin-L backbone; bria-rmbg, listed but not offered): the published
ONNX run as published, with rembg's steps for its BiRefNet sessions (craftai_infer.pipelines
.matte_u2netp `BIREFNET`: 1024², ImageNet normalisation of the picture divided by its maximum, the
sigmoid of the logits in float32, min-max, Lanczos back), so that the matte is rembg's byte for byte.

These are not birefnet-lite's steps (routes/birefnet_onnx.py, BiRefNet's own pre-processing and the
matte's refinement): rembg's users pick these recipes for rembg's answers."""

from __future__ import annotations

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.routes.isnet_onnx import IsnetOnnx

# onnxruntime's working memory for one picture on the CPU, measured on a Swin-L BiRefNet graph at
# 1024² (docs/API.md, "image.matte with rembg's BiRefNet models"), rounded up.
NETWORK_BYTES = 3072 * 2**20


class BirefnetRembgOnnx(IsnetOnnx):
    """One 1024² picture in, its logits first out (the graph's contract, checked at load)."""

    steps = matte_u2netp.BIREFNET
    network_bytes = NETWORK_BYTES


class BriaRembgOnnx(BirefnetRembgOnnx):
    """BRIA's RMBG-2.0 graph answers the map with the sigmoid applied: rembg takes no sigmoid."""

    steps = matte_u2netp.BRIA
