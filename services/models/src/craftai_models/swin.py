"""Swin Transformer v1 backbone (Liu et al., ICCV 2021) as InSPyReNet and BiRefNet use it.

This is the "dense prediction" flavour of Swin (the Swin authors' detection code) that both were
trained with, written here from the paper and the published checkpoints' key names
(tests/data/matte_inspyrenet_state_dict.tsv; BiRefNet's `models/backbones/swin_v1.py` layout):

- the window size stays the same at every stage (12 for InSPyReNet's Swin-B, 7 for BiRefNet_lite's
  Swin-T), even where the feature map is smaller than a window;
  each block pads its (normalised) tokens with zeros on the right/bottom up to a multiple of the
  window, and those zero tokens take part in attention (no padding mask). The shifted-window mask
  marks the three bands of the *padded* grid with -100, as the trained network saw it.
- `relative_position_index` is a persistent buffer, so it is read from the checkpoint like a weight.
- extra LayerNorms `norm0..norm3` on the four stage outputs; InSPyReNet also takes the patch
  embedding (normalised) as the first of five maps, BiRefNet only the four stage outputs.

Only inference: no dropout, no stochastic depth (identity at eval), no initialisation scheme.
Tokens are kept as (B, H, W, C) tensors; comments give shapes for Swin-B on a 1024² picture.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["SwinTransformer", "swin_b", "swin_l", "swin_t"]

# The shifted-window mask value: large enough to vanish after softmax, small enough for fp16.
_MASKED = -100.0


class Mlp(nn.Module):
    """Two linear layers with GELU between (the block's feed-forward part)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc2(self.act(self.fc1(x)))
        return out


def _pad_to(size: int, multiple: int) -> int:
    """What `size` needs to reach a multiple of `multiple`, from non-negative numbers only (a
    traced export turns Python's floor division of a negative size into a truncating one)."""
    return (multiple - size % multiple) % multiple


def relative_position_index(window: int) -> Tensor:
    """Index into the (2w-1)² bias table for every pair of tokens of a w×w window: (w², w²) int64."""
    ys, xs = torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()  # (w²,) row-major token coordinates
    dy = ys[:, None] - ys[None, :] + (window - 1)  # 0 .. 2w-2
    dx = xs[:, None] - xs[None, :] + (window - 1)
    return dy * (2 * window - 1) + dx


class WindowAttention(nn.Module):
    """Multi-head self-attention inside one window, with a learnt relative position bias."""

    def __init__(self, dim: int, window: int, heads: int) -> None:
        super().__init__()
        self.window = window
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self.register_buffer("relative_position_index", relative_position_index(window))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def position_bias(self) -> Tensor:
        """(heads, w², w²) bias gathered from the table through the (loaded) index buffer."""
        n = self.window * self.window
        index = self.relative_position_index
        assert isinstance(index, Tensor)
        bias = self.relative_position_bias_table[index.reshape(-1)].reshape(n, n, self.heads)
        return bias.permute(2, 0, 1)

    def forward(self, windows: Tensor, mask: Tensor | None) -> Tensor:
        """windows (B·nW, w², C), mask (nW, w², w²) of 0/-100 or None -> (B·nW, w², C)."""
        bnw, n, c = windows.shape
        qkv = self.qkv(windows).reshape(bnw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B·nW, heads, w², C/heads)
        bias = self.position_bias().unsqueeze(0)  # (1, heads, w², w²)
        if mask is not None:
            nw = mask.shape[0]
            # (nW, heads, w², w²) repeated for each picture of the batch, windows being batch-major.
            bias = (bias + mask.unsqueeze(1)).repeat(bnw // nw, 1, 1, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=self.scale)
        projected: Tensor = self.proj(out.transpose(1, 2).reshape(bnw, n, c))
        return projected


def _to_windows(x: Tensor, window: int) -> Tensor:
    """(B, Hp, Wp, C) -> (B·nW, w², C), windows in row-major order within each picture."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // window, window, w // window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window * window, c)


def _from_windows(windows: Tensor, window: int, b: int, h: int, w: int) -> Tensor:
    """(B·nW, w², C) -> (B, Hp, Wp, C), the inverse of `_to_windows`."""
    c = windows.shape[-1]
    x = windows.reshape(b, h // window, w // window, window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, w, c)


def shifted_window_mask(hp: int, wp: int, window: int, shift: int, device: torch.device) -> Tensor:
    """(nW, w², w²) mask: -100 between tokens that came from different bands of the rolled grid.

    After rolling by -shift, each axis of the padded grid has three bands: [0, Hp-w), [Hp-w, Hp-shift),
    [Hp-shift, Hp); a token may only attend to tokens of its own band pair.
    """

    def bands(n: int) -> Tensor:
        idx = torch.arange(n, device=device)
        return (idx >= n - window).long() + (idx >= n - shift).long()

    region = (bands(hp)[:, None] * 3 + bands(wp)[None, :]).to(torch.float32)  # (Hp, Wp)
    ids = _to_windows(region[None, :, :, None], window).squeeze(-1)  # (nW, w²)
    differs = ids[:, None, :] != ids[:, :, None]
    return torch.zeros(differs.shape, device=device).masked_fill(differs, _MASKED)


class SwinBlock(nn.Module):
    """(Shifted-)window attention then MLP, each with a pre-LayerNorm and a residual."""

    def __init__(self, dim: int, heads: int, window: int, shift: int) -> None:
        super().__init__()
        self.window = window
        self.shift = shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, H, W, C) -> (B, H, W, C); `mask` is used by shifted blocks only."""
        b, h, w, _ = x.shape
        y = self.norm1(x)
        # Zero tokens appended after the norm up to a multiple of the window (they are attended to).
        pad_h, pad_w = _pad_to(h, self.window), _pad_to(w, self.window)
        y = F.pad(y, (0, 0, 0, pad_w, 0, pad_h))
        hp, wp = h + pad_h, w + pad_w
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = self.attn(_to_windows(y, self.window), mask if self.shift else None)
        y = _from_windows(y, self.window, b, hp, wp)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + y[:, :h, :w, :]
        out: Tensor = x + self.mlp(self.norm2(x))
        return out


class PatchMerging(nn.Module):
    """2×2 neighbourhood -> one token: LayerNorm then a linear map 4C -> 2C (odd sizes padded)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: Tensor) -> Tensor:
        """(B, H, W, C) -> (B, ⌈H/2⌉, ⌈W/2⌉, 2C)."""
        _, h, w, _ = x.shape
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        # Channel order of the concatenation is fixed by the weights: (even,even), (odd,even), (even,odd), (odd,odd).
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        out: Tensor = self.reduction(self.norm(x))
        return out


class SwinStage(nn.Module):
    """`depth` blocks alternating plain and shifted windows, then an optional patch merging."""

    def __init__(self, dim: int, depth: int, heads: int, window: int, downsample: bool) -> None:
        super().__init__()
        self.window = window
        self.shift = window // 2
        self.blocks = nn.ModuleList(
            SwinBlock(dim, heads, window, 0 if i % 2 == 0 else self.shift) for i in range(depth)
        )
        self.downsample = PatchMerging(dim) if downsample else None

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, H, W, C) -> (stage output (B, H, W, C), input of the next stage)."""
        _, h, w, _ = x.shape
        hp, wp = h + _pad_to(h, self.window), w + _pad_to(w, self.window)
        mask = shifted_window_mask(hp, wp, self.window, self.shift, x.device)
        for block in self.blocks:
            x = block(x, mask)
        return x, (self.downsample(x) if self.downsample is not None else x)


class PatchEmbed(nn.Module):
    """4×4 patches -> tokens (a strided convolution), then LayerNorm; input padded to a multiple of 4."""

    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        """(B, 3, H, W) -> (B, H/4, W/4, C)."""
        h, w = x.shape[-2:]
        x = F.pad(x, (0, _pad_to(w, self.patch), 0, _pad_to(h, self.patch)))
        tokens: Tensor = self.norm(self.proj(x).permute(0, 2, 3, 1))
        return tokens


class SwinTransformer(nn.Module):
    """Swin backbone returning [embedding, stage0, stage1, stage2, stage3] as NCHW maps, or the four
    stage maps only with `with_embedding=False`."""

    def __init__(
        self,
        embed_dim: int,
        depths: Sequence[int],
        heads: Sequence[int],
        window: int,
        patch: int = 4,
        *,
        with_embedding: bool = True,
    ) -> None:
        super().__init__()
        self.with_embedding = with_embedding
        self.patch_embed = PatchEmbed(patch, embed_dim)
        dims = [embed_dim * 2**i for i in range(len(depths))]
        self.layers = nn.ModuleList(
            SwinStage(dims[i], depths[i], heads[i], window, downsample=i < len(depths) - 1) for i in range(len(depths))
        )
        for i, dim in enumerate(dims):
            self.add_module(f"norm{i}", nn.LayerNorm(dim))

    def forward(self, x: Tensor) -> list[Tensor]:
        """(B, 3, H, W) -> 5 maps; for Swin-B at 1024²: 128@256², 128@256², 256@128², 512@64², 1024@32²."""
        x = self.patch_embed(x)  # (B, H/4, W/4, C)
        outs = [x.permute(0, 3, 1, 2).contiguous()] if self.with_embedding else []
        for i, layer in enumerate(self.layers):
            y, x = layer(x)
            norm: nn.Module = getattr(self, f"norm{i}")
            outs.append(norm(y).permute(0, 3, 1, 2).contiguous())
        return outs


def swin_b() -> SwinTransformer:
    """Swin-B as in InSPyReNet: C=128, depths 2-2-18-2, heads 4-8-16-32, window 12."""
    return SwinTransformer(embed_dim=128, depths=(2, 2, 18, 2), heads=(4, 8, 16, 32), window=12)


def swin_t(*, with_embedding: bool = False) -> SwinTransformer:
    """Swin-T as in BiRefNet_lite (`swin_v1_t`): C=96, depths 2-2-6-2, heads 3-6-12-24, window 7."""
    return SwinTransformer(
        embed_dim=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), window=7, with_embedding=with_embedding
    )


def swin_l() -> SwinTransformer:
    """Swin-L as in BiRefNet (`swin_v1_l`, its general, portrait, DIS, HRSOD, COD, massive, HR and
    dynamic weights): C=192, depths 2-2-18-2, heads 6-12-24-48, window 12."""
    return SwinTransformer(embed_dim=192, depths=(2, 2, 18, 2), heads=(6, 12, 24, 48), window=12, with_embedding=False)
