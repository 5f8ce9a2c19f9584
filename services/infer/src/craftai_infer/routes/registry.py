"""Which route runs each (recipe, engine): the one list a new route is added to.

A route's module is imported when the route is first built, not when the list is read: the engines
are optional extras (`craftai-infer[onnx-cpu]`, `[torch]`, `[openvino]`), and a service installed
without torch must still list and run its onnxruntime routes. An engine whose package is missing
is answered in plain words (ENGINE_NOT_INSTALLED, with the extra to install) when a caller asks for
one of its routes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from craftai_common.errors import failed_precondition
from craftai_infer.routes import Factory, Route, RouteFiles
from craftai_wire.vocabulary import Engine, Reason

# (recipe, engine) -> the route's module (under craftai_infer.routes) and class.
ROUTES: dict[tuple[str, str], str] = {
    ("sam2-hiera-tiny", "onnxruntime"): "sam2_onnx.Sam2Onnx",
    ("sam2.1-hiera-tiny", "onnxruntime"): "sam2_onnx.Sam2Onnx",
    ("sam2-hiera-tiny", "torch"): "sam2_torch.Sam2Torch",
    ("sam2.1-hiera-tiny", "torch"): "sam2_torch.Sam2Torch",
    ("u2netp", "onnxruntime"): "u2netp_onnx.U2netpOnnx",
    ("u2netp", "torch"): "u2netp_torch.U2netpTorch",
    ("u2netp", "openvino"): "u2netp_openvino.U2netpOpenvino",
    ("u2net", "onnxruntime"): "u2netp_onnx.U2netpOnnx",
    ("u2net", "torch"): "u2netp_torch.U2netTorch",
    ("u2net_human_seg", "onnxruntime"): "u2netp_onnx.U2netpOnnx",
    ("u2net_human_seg", "torch"): "u2netp_torch.U2netTorch",
    ("silueta", "onnxruntime"): "u2netp_onnx.U2netpOnnx",
    ("u2net_cloth_seg", "onnxruntime"): "u2net_cloth_onnx.U2netClothOnnx",
    ("isnet-general-use", "onnxruntime"): "isnet_onnx.IsnetOnnx",
    ("isnet-general-use", "torch"): "isnet_torch.IsnetTorch",
    ("isnet-anime", "onnxruntime"): "isnet_onnx.IsnetAnimeOnnx",
    ("isnet-anime", "torch"): "isnet_torch.IsnetAnimeTorch",
    ("birefnet-general", "onnxruntime"): "birefnet_rembg_onnx.BirefnetRembgOnnx",
    ("birefnet-general", "torch"): "birefnet_rembg_torch.BirefnetRembgTorch",
    ("birefnet-portrait", "onnxruntime"): "birefnet_rembg_onnx.BirefnetRembgOnnx",
    ("birefnet-portrait", "torch"): "birefnet_rembg_torch.BirefnetRembgTorch",
    ("birefnet-dis", "onnxruntime"): "birefnet_rembg_onnx.BirefnetRembgOnnx",
    ("birefnet-hrsod", "onnxruntime"): "birefnet_rembg_onnx.BirefnetRembgOnnx",
    ("birefnet-cod", "onnxruntime"): "birefnet_rembg_onnx.BirefnetRembgOnnx",
    ("birefnet-cod", "torch"): "birefnet_rembg_torch.BirefnetRembgTorch",
    ("birefnet-massive", "onnxruntime"): "birefnet_rembg_onnx.BirefnetRembgOnnx",
    ("bria-rmbg", "onnxruntime"): "birefnet_rembg_onnx.BriaRembgOnnx",
    ("inspyrenet-swinb", "torch"): "inspyrenet_torch.InspyrenetTorch",
    ("birefnet-lite", "onnxruntime"): "birefnet_onnx.BirefnetOnnx",
    ("birefnet-hr", "onnxruntime"): "birefnet_onnx.BirefnetHrOnnx",
    ("birefnet-lite", "torch"): "birefnet_torch.BirefnetTorch",
    ("birefnet-hr", "torch"): "birefnet_torch.BirefnetTorch",
    ("birefnet-dynamic", "torch"): "birefnet_dynamic_torch.BirefnetDynamicTorch",
}
# An engine's package -> the extra of craftai-infer that installs it (a route may need another
# engine's package for its pipeline: birefnet's onnxruntime route post-processes on torch).
EXTRAS: dict[str, str] = {Engine.ONNXRUNTIME: "onnx-cpu", Engine.TORCH: "torch", Engine.OPENVINO: "openvino"}


@dataclass(frozen=True)
class LazyRoute:
    """A route's factory that imports its module on first use."""

    engine: str
    path: str  # "module.Class" under craftai_infer.routes

    def load(self) -> Factory:
        module, name = self.path.rsplit(".", 1)
        try:
            found: Factory = getattr(importlib.import_module(f"craftai_infer.routes.{module}"), name)
        except ImportError as exc:
            package = (exc.name or "").split(".")[0]
            if package not in EXTRAS:
                raise  # not an engine's package missing: a fault of the route's own imports
            raise failed_precondition(
                Reason.ENGINE_NOT_INSTALLED,
                f"this route ({self.engine} engine) needs {package}, which this infer service cannot import "
                f"({exc}); install it beside the service with: pip install 'craftai-infer[{EXTRAS[package]}]' "
                "(or ask for another of the recipe's engines: GetRuntime lists those this service runs)",
                engine=self.engine,
            ) from exc
        return found

    def __call__(self, files: RouteFiles, device: str) -> Route:
        return self.load()(files, device)


def factories() -> dict[tuple[str, str], Factory]:
    """(recipe, engine) -> factory; nothing is imported until a factory is called."""
    return {key: LazyRoute(key[1], path) for key, path in ROUTES.items()}
