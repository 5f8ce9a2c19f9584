"""What runs each route: a factory per (recipe, engine), building the model from its files.

A factory gets the route's verified files and a device, and returns an object with the
feature's methods (`matte(picture) -> matte` for image.matte; `encode(rgb) -> embedding` and
`decode(embedding, prompt, all_masks) -> masks` for image.segment). It is called again with the
CPU when the GPU fails (see craftai_infer.loader).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
from PIL import Image

from craftai_common.store import FilePin

if TYPE_CHECKING:
    from craftai_infer.pipelines.segment_sam import SamMasks, SamPrompt

Precision = Literal["auto", "fp32", "fp16", "bf16"]


class ModelRefusedError(Exception):
    """A file passed its hash check but does not fit the network (e.g. a test pin of another file);
    answered as FAILED_PRECONDITION with this message."""


@dataclass(frozen=True)
class RouteFiles:
    """The verified files of a route, by role ("network", "encoder", "weights", ...), and how to run it."""

    by_role: dict[str, Path]
    prepared: Path | None
    cpu_threads: int
    pins: dict[str, FilePin] = field(default_factory=dict)
    gpu_precision: Precision = "auto"

    def role(self, name: str) -> Path:
        try:
            return self.by_role[name]
        except KeyError:
            raise KeyError(f"the recipe pins no file with role {name!r} (roles: {sorted(self.by_role)})") from None


class Model(Protocol):
    device: str


class MatteModel(Model, Protocol):
    def matte(self, picture: Image.Image) -> Image.Image:
        """8-bit matte at the picture's size, white = subject."""
        ...


class SegmentModel(Model, Protocol):
    """image.segment: the image encoder once per picture, the mask decoder once per prompt."""

    def encode(self, picture: npt.NDArray[np.uint8]) -> Any:
        """The picture's embedding (RGB uint8 HxWx3 in); has `nbytes`, kept in a session."""
        ...

    def decode(self, embedding: Any, prompt: SamPrompt, *, all_masks: bool = False) -> SamMasks:
        """Masks at the picture's size for one prompt on an embedding this model made, best first."""
        ...


Factory = Callable[[RouteFiles, str], Model]


def factories() -> dict[tuple[str, str], Factory]:
    """(recipe, engine) -> factory. Imports are lazy so an engine not installed costs nothing."""
    from craftai_infer.routes import inspyrenet, sam2, u2netp

    return {
        ("sam2-hiera-tiny", "onnxruntime"): sam2.Sam2Onnx,
        ("sam2.1-hiera-tiny", "onnxruntime"): sam2.Sam2Onnx,
        ("sam2-hiera-tiny", "torch"): sam2.Sam2Torch,
        ("sam2.1-hiera-tiny", "torch"): sam2.Sam2Torch,
        ("u2netp", "onnxruntime"): u2netp.U2netpOnnx,
        ("u2netp", "torch"): u2netp.U2netpTorch,
        ("inspyrenet-swinb", "torch"): inspyrenet.InspyrenetTorch,
    }
