"""What image.matte is asked to make from a matte, and what it answers: plain data, no torch (the
feature validates a request into an `OutputsSpec` at the edge; pipelines/matte_outputs.py makes the
outputs on the route's device; a route answering only the matte never imports torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

__all__ = ["WHITE", "Background", "Blur", "Cover", "Kind", "Matte", "OutputsSpec", "Rendered", "Solid"]

U8 = npt.NDArray[np.uint8]
# (H, W) uint8, the picture's size, 255 = subject: a host array, or a torch tensor on the route's
# device (a matte computed on a GPU stays there: its outputs are made there too).
Matte: TypeAlias = "npt.NDArray[np.uint8] | torch.Tensor"
Kind = Literal["matte", "cutout", "composite", "mask"]
WHITE = (255, 255, 255, 255)


@dataclass(frozen=True)
class Solid:
    """A solid background colour: straight RGBA, each 0..255."""

    rgba: tuple[int, int, int, int] = WHITE

    @property
    def opaque(self) -> bool:
        return self.rgba[3] == 255


@dataclass(frozen=True)
class Blur:
    """A blur of the picture itself: a Gaussian of standard deviation `radius` pixels."""

    radius: float
    opaque: bool = True


@dataclass(frozen=True, eq=False)
class Cover:
    """Another picture (the one picture type: (h, w, 3) RGB or (h, w, 4) RGBA), scaled to cover."""

    picture: U8

    @property
    def opaque(self) -> bool:
        return self.picture.shape[2] == 3 or bool((self.picture[:, :, 3] == 255).all())


Background = Solid | Blur | Cover


@dataclass(frozen=True)
class OutputsSpec:
    """What to make from a matte (validated at the edge: features/matte.py)."""

    kinds: frozenset[Kind] = frozenset({"matte"})
    naive: bool = False  # cutout and composite keep the picture's own colours
    background: Background = field(default_factory=Solid)
    threshold: float = 0.5


@dataclass(frozen=True)
class Rendered:
    """The outputs asked for, as host arrays: matte (H, W), cutout (H, W, 4), composite (H, W, 3 or 4),
    mask (H, W) bool; `stages_ms`, where the time of making them went, by stage: "network" (the
    route's call for the batch the picture was in), then each output made ("cutout": the foreground
    estimation, "composite", "mask"; "host": the copies back from a GPU)."""

    matte: U8 | None = None
    cutout: U8 | None = None
    composite: U8 | None = None
    mask: npt.NDArray[np.bool_] | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)
