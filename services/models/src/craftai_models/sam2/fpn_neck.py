"""The image encoder's neck: a feature pyramid (Lin et al. 2017) over the Hiera stage outputs.

Each stage output goes through a 1x1 conv to d_model channels (lateral). Only the levels listed in
`top_down_levels` (the two coarsest for SAM 2) also receive the coarser level, upsampled 2x with
nearest-neighbour interpolation, by summation; the two fine levels stay purely lateral. No output
convs. SAM 2 keeps the three finest levels (scalp 1): 256 x 256², 256 x 128², 256 x 64² at 1024².

The sine position encoding (DETR style) belongs to the neck in Meta's code; the image path never
uses it (only the video memory does), so it is a separate function here and `forward` skips it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class Lateral(nn.Module):
    """A 1x1 conv, wrapped so that its parameters are named `convs.N.conv.*` as in Meta's checkpoints."""

    def __init__(self, in_channels: int, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, d_model, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(x)
        return out


class FpnNeck(nn.Module):
    """Lateral 1x1 convs and a partial top-down pathway (sum fusion, nearest 2x upsampling)."""

    def __init__(
        self,
        d_model: int = 256,
        backbone_channel_list: Sequence[int] = (768, 384, 192, 96),
        top_down_levels: Sequence[int] = (2, 3),
    ) -> None:
        super().__init__()
        self.d_model = d_model
        # convs[0] serves the deepest (widest) stage, as in the channel list
        self.convs = nn.ModuleList(Lateral(c, d_model) for c in backbone_channel_list)
        self.top_down_levels = tuple(top_down_levels)

    def forward(self, stages: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        # stages: [B, C_i, H_i, W_i], finest first -> [B, d_model, H_i, W_i], finest first
        n = len(self.convs) - 1
        if len(stages) != n + 1:
            raise ValueError(f"the neck expects {n + 1} stage outputs, got {len(stages)}")
        out: list[torch.Tensor] = [stages[0]] * (n + 1)
        previous: torch.Tensor | None = None
        for level in range(n, -1, -1):  # coarse to fine
            lateral = self.convs[n - level](stages[level])
            if level in self.top_down_levels and previous is not None:
                lateral = lateral + F.interpolate(previous, scale_factor=2.0, mode="nearest")
            previous = lateral
            out[level] = lateral
        return out


def sine_position_encoding(
    batch: int,
    height: int,
    width: int,
    *,
    channels: int = 256,
    temperature: float = 10000.0,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Normalised 2D sine/cosine encoding [B, channels, H, W]: y features first, then x.

    Positions 1..H (1..W) are scaled to (0, 2π]; within each half, even channels take the sine and
    odd channels the cosine of position / temperature^(2*(i//2)/half).
    """
    half = channels // 2
    eps, scale = 1e-6, 2 * math.pi
    y = torch.arange(1, height + 1, dtype=torch.float32, device=device) / (height + eps) * scale  # [H]
    x = torch.arange(1, width + 1, dtype=torch.float32, device=device) / (width + eps) * scale  # [W]
    dim_t = torch.arange(half, dtype=torch.float32, device=device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / half)  # [half]

    def encode(pos: torch.Tensor) -> torch.Tensor:  # [N] -> [N, half], sin/cos interleaved
        angles = pos[:, None] / dim_t
        return torch.stack((angles[:, 0::2].sin(), angles[:, 1::2].cos()), dim=2).flatten(1)

    pos_y = encode(y)[:, None, :].expand(height, width, half)
    pos_x = encode(x)[None, :, :].expand(height, width, half)
    pos = torch.cat((pos_y, pos_x), dim=2).permute(2, 0, 1)  # [C, H, W]
    return pos.unsqueeze(0).expand(batch, -1, -1, -1)
