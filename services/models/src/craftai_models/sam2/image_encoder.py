"""SAM 2's image encoder: the Hiera trunk followed by the FPN neck, coarsest level dropped ("scalp").

At 1024² it returns three 256-channel maps at strides 4, 8 and 16 (256², 128², 64²). The stride-16
map is the image embedding the mask decoder attends to; the two finer maps feed its upsampler.
"""

from __future__ import annotations

import torch
from torch import nn

from .fpn_neck import FpnNeck
from .hiera import Hiera, HieraConfig


class ImageEncoder(nn.Module):
    """Trunk + neck; `scalp` coarsest levels are computed (they feed the top-down path) but not returned."""

    def __init__(self, trunk_config: HieraConfig | None = None, d_model: int = 256, scalp: int = 1) -> None:
        super().__init__()
        cfg = trunk_config or HieraConfig()
        self.trunk = Hiera(cfg)
        self.neck = FpnNeck(d_model, cfg.channel_list, top_down_levels=(2, 3))
        self.scalp = scalp

    def forward(self, image: torch.Tensor) -> list[torch.Tensor]:
        # image: [B, 3, 1024, 1024] -> [B,256,256,256], [B,256,128,128], [B,256,64,64]
        levels: list[torch.Tensor] = self.neck(self.trunk(image))
        return levels[: len(levels) - self.scalp]
