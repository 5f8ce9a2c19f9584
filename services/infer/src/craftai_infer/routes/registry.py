"""Which route runs each (recipe, engine): the one list a new route is added to."""

from __future__ import annotations

from craftai_infer.routes import Factory


def factories() -> dict[tuple[str, str], Factory]:
    """(recipe, engine) -> factory. Imports are lazy so an engine not installed costs nothing."""
    from craftai_infer.routes import (
        birefnet_onnx,
        birefnet_torch,
        inspyrenet_torch,
        sam2_onnx,
        sam2_torch,
        u2netp_onnx,
        u2netp_openvino,
        u2netp_torch,
    )

    return {
        ("sam2-hiera-tiny", "onnxruntime"): sam2_onnx.Sam2Onnx,
        ("sam2.1-hiera-tiny", "onnxruntime"): sam2_onnx.Sam2Onnx,
        ("sam2-hiera-tiny", "torch"): sam2_torch.Sam2Torch,
        ("sam2.1-hiera-tiny", "torch"): sam2_torch.Sam2Torch,
        ("u2netp", "onnxruntime"): u2netp_onnx.U2netpOnnx,
        ("u2netp", "torch"): u2netp_torch.U2netpTorch,
        ("u2netp", "openvino"): u2netp_openvino.U2netpOpenvino,
        ("inspyrenet-swinb", "torch"): inspyrenet_torch.InspyrenetTorch,
        ("birefnet-lite", "onnxruntime"): birefnet_onnx.BirefnetOnnx,
        ("birefnet-lite", "torch"): birefnet_torch.BirefnetTorch,
    }
