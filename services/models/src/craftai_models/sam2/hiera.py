"""The image encoder's trunk: Hiera (Ryali et al. 2023) as SAM 2 uses it ("hieradet").

A hierarchical vision transformer on channels-last token maps [B, H, W, C]. Four stages; the
first block of stages 2-4 halves the resolution by max-pooling the queries inside its attention
(q-pooling) and doubles the width and the head count. Blocks attend inside non-overlapping windows
(zero-padded to a multiple of the window), except the global-attention blocks. The absolute
position embedding is a small background table interpolated bicubically to the token grid plus a
window-sized table tiled over it (Bolya et al. 2023, "Window attention is bugged").

For SAM 2.1 tiny at 1024²: patch embedding 1024² -> 256² x 96, stages of [1, 2, 7, 2] blocks, the
stage outputs are 96 x 256², 192 x 128², 384 x 64², 768 x 32².
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layers import MLP, attention

LAYER_NORM_EPS = 1e-6


@dataclass(frozen=True)
class HieraConfig:
    """The trunk's hyper-parameters; the defaults are SAM 2.1 hiera tiny."""

    embed_dim: int = 96
    num_heads: int = 1
    stages: tuple[int, ...] = (1, 2, 7, 2)
    global_att_blocks: tuple[int, ...] = (5, 7, 9)
    window_spec: tuple[int, ...] = (8, 4, 14, 7)
    window_pos_embed_bkg_spatial_size: tuple[int, int] = (7, 7)
    q_pool: int = 3
    q_stride: int = 2
    dim_mul: float = 2.0
    head_mul: float = 2.0
    mlp_ratio: float = 4.0

    @property
    def stage_ends(self) -> list[int]:
        """Index of the last block of each stage ([0, 2, 9, 11] for tiny)."""
        return [sum(self.stages[: i + 1]) - 1 for i in range(len(self.stages))]

    @property
    def channel_list(self) -> list[int]:
        """Widths of the stage outputs, deepest first ([768, 384, 192, 96] for tiny), as the neck lists them."""
        widths = [int(self.embed_dim * self.dim_mul**i) for i in range(len(self.stages))]
        return widths[::-1]


def window_partition(x: torch.Tensor, window: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """[B, H, W, C] -> ([B * nWin, window, window, C], padded (Hp, Wp)); pads bottom/right with zeros."""
    b, h, w, c = x.shape
    pad_h = (window - h % window) % window
    pad_w = (window - w % window) % window
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    hp, wp = h + pad_h, w + pad_w
    x = x.view(b, hp // window, window, wp // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window, window, c), (hp, wp)


def window_unpartition(
    windows: torch.Tensor, window: int, padded: tuple[int, int], size: tuple[int, int]
) -> torch.Tensor:
    """Inverse of `window_partition`: [B * nWin, window, window, C] -> [B, H, W, C], padding cropped."""
    hp, wp = padded
    h, w = size
    b = windows.shape[0] // ((hp // window) * (wp // window))
    x = windows.reshape(b, hp // window, wp // window, window, window, -1)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, -1)
    if hp > h or wp > w:
        x = x[:, :h, :w, :]
    return x


def max_pool_tokens(x: torch.Tensor, stride: int) -> torch.Tensor:
    """2D max-pool of a channels-last token map: [B, H, W, C] -> [B, H/s, W/s, C] (floor)."""
    x = F.max_pool2d(x.permute(0, 3, 1, 2), kernel_size=stride, stride=stride)
    return x.permute(0, 2, 3, 1)


class PatchEmbed(nn.Module):
    """Conv 7x7 stride 4 pad 3: [B, 3, H, W] -> [B, H/4, W/4, C] (channels last from here on)."""

    def __init__(self, embed_dim: int, in_chans: int = 3) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=7, stride=4, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x)  # [B, C, H/4, W/4]
        return x.permute(0, 2, 3, 1)


class MultiScaleAttention(nn.Module):
    """Multi-head self-attention whose queries may be max-pooled (the stage transition).

    Keys and values keep the input resolution, so each pooled query still sees the whole window.
    """

    def __init__(self, dim: int, dim_out: int, num_heads: int, q_stride: int | None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_stride = q_stride
        self.qkv = nn.Linear(dim, dim_out * 3)
        self.proj = nn.Linear(dim_out, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, H, W, C] (B counts windows when windowed)
        b, h, w, _ = x.shape
        # [B, H*W, 3, heads, d] -> 3 x [B, heads, H*W, d]
        qkv = self.qkv(x).reshape(b, h * w, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.q_stride:
            # [B, heads, H*W, d] -> [B*heads, H, W, d] -> pooled -> [B, heads, H'*W', d]
            d = q.shape[-1]
            q = max_pool_tokens(q.reshape(b * self.num_heads, h, w, d), self.q_stride)
            h, w = q.shape[1:3]
            q = q.reshape(b, self.num_heads, h * w, d)
        x = attention(q, k, v)  # [B, heads, H'*W', d]
        x = self.proj(x.transpose(1, 2).reshape(b, h, w, -1))
        return x


class MultiScaleBlock(nn.Module):
    """Pre-norm transformer block: (windowed) attention with optional q-pooling, then a GELU MLP.

    When the width changes, the residual is projected (Linear) and pooled like the queries.
    """

    def __init__(
        self, dim: int, dim_out: int, num_heads: int, *, window_size: int, q_stride: int | None, mlp_ratio: float
    ) -> None:
        super().__init__()
        self.dim = dim
        self.dim_out = dim_out
        self.window_size = window_size
        self.q_stride = q_stride
        self.norm1 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.attn = MultiScaleAttention(dim, dim_out, num_heads, q_stride)
        self.norm2 = nn.LayerNorm(dim_out, eps=LAYER_NORM_EPS)
        self.mlp = MLP(dim_out, int(dim_out * mlp_ratio), dim_out, num_layers=2, activation=nn.GELU)
        if dim != dim_out:
            self.proj = nn.Linear(dim, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, H, W, dim] -> [B, H/s, W/s, dim_out]
        shortcut = x
        x = self.norm1(x)
        if self.dim != self.dim_out:
            shortcut = self.proj(x)
            if self.q_stride:
                shortcut = max_pool_tokens(shortcut, self.q_stride)

        window = self.window_size
        if window > 0:
            h, w = x.shape[1:3]
            x, padded = window_partition(x, window)
        x = self.attn(x)
        if window > 0:
            if self.q_stride:
                # the windows shrank with the queries; the padding is recomputed for the pooled grid
                window //= self.q_stride
                h, w = shortcut.shape[1:3]
                padded = (h + (window - h % window) % window, w + (window - w % window) % window)
            x = window_unpartition(x, window, padded, (h, w))

        x = shortcut + x
        mlp_out: torch.Tensor = self.mlp(self.norm2(x))
        return x + mlp_out


class Hiera(nn.Module):
    """The trunk: patch embedding, position embedding, blocks; returns every stage's output."""

    def __init__(self, config: HieraConfig | None = None) -> None:
        super().__init__()
        cfg = config or HieraConfig()
        self.config = cfg
        self.stage_ends = cfg.stage_ends
        self.patch_embed = PatchEmbed(cfg.embed_dim)
        # [1, C, 7, 7] background table, interpolated to the grid; [1, C, 8, 8] tiled per window
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.embed_dim, *cfg.window_pos_embed_bkg_spatial_size))
        self.pos_embed_window = nn.Parameter(torch.zeros(1, cfg.embed_dim, cfg.window_spec[0], cfg.window_spec[0]))

        q_pool_blocks = [end + 1 for end in self.stage_ends[:-1]][: cfg.q_pool]
        dim, heads, stage = cfg.embed_dim, cfg.num_heads, 0
        blocks: list[MultiScaleBlock] = []
        for i in range(sum(cfg.stages)):
            dim_out = dim
            # The first block of a stage still uses the previous stage's window (before pooling).
            window = 0 if i in cfg.global_att_blocks else cfg.window_spec[stage]
            if i - 1 in self.stage_ends:
                dim_out = int(dim * cfg.dim_mul)
                heads = int(heads * cfg.head_mul)
                stage += 1
            q_stride = cfg.q_stride if i in q_pool_blocks else None
            blocks.append(
                MultiScaleBlock(dim, dim_out, heads, window_size=window, q_stride=q_stride, mlp_ratio=cfg.mlp_ratio)
            )
            dim = dim_out
        self.blocks = nn.ModuleList(blocks)

    def position_embedding(self, h: int, w: int) -> torch.Tensor:
        """[1, h, w, C]: bicubic background table + tiled window table (h, w multiples of the window)."""
        pos = F.interpolate(self.pos_embed, size=(h, w), mode="bicubic")
        win = self.pos_embed_window
        pos = pos + win.tile(1, 1, h // win.shape[-2], w // win.shape[-1])
        return pos.permute(0, 2, 3, 1)

    def forward(self, image: torch.Tensor) -> list[torch.Tensor]:
        # image: [B, 3, H, W] -> stage outputs [B, C_i, H_i, W_i], highest resolution first
        x = self.patch_embed(image)  # [B, H/4, W/4, C]
        x = x + self.position_embedding(x.shape[1], x.shape[2])
        outputs: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.stage_ends:
                outputs.append(x.permute(0, 3, 1, 2))
        return outputs
