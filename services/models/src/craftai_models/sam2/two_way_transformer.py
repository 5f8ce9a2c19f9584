"""The mask decoder's two-way transformer (SAM, Kirillov et al. 2023, section 3 and appendix A).

Tokens (output tokens + prompt tokens) and image cells update each other: every layer does token
self-attention, token-to-image cross-attention, a token MLP, and image-to-token cross-attention;
a final token-to-image attention closes it. Positional encodings are re-added to queries and keys
at every attention (the prompt tokens' own embeddings act as their positions). Cross-attentions
project to half the width (downsample rate 2). Post-norm LayerNorms (eps 1e-5).
"""

from __future__ import annotations

import torch
from torch import nn

from .layers import MLP, attention


class Attention(nn.Module):
    """Multi-head attention with separate q/k/v/out projections and an optional narrower inner width."""

    def __init__(self, embed_dim: int, num_heads: int, downsample_rate: int = 1) -> None:
        super().__init__()
        inner = embed_dim // downsample_rate
        if inner % num_heads:
            raise ValueError("num_heads must divide the inner width")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, inner)
        self.k_proj = nn.Linear(embed_dim, inner)
        self.v_proj = nn.Linear(embed_dim, inner)
        self.out_proj = nn.Linear(inner, embed_dim)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        # [B, N, inner] -> [B, heads, N, inner/heads]
        b, n, c = x.shape
        return x.reshape(b, n, self.num_heads, c // self.num_heads).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q: [B, Nq, C], k/v: [B, Nk, C] -> [B, Nq, C]
        out = attention(self._heads(self.q_proj(q)), self._heads(self.k_proj(k)), self._heads(self.v_proj(v)))
        b, _, n, _ = out.shape
        projected: torch.Tensor = self.out_proj(out.transpose(1, 2).reshape(b, n, -1))
        return projected


class TwoWayAttentionBlock(nn.Module):
    """Self-attn (tokens) -> cross-attn tokens->image -> MLP (tokens) -> cross-attn image->tokens."""

    def __init__(self, embed_dim: int, num_heads: int, mlp_dim: int, skip_first_layer_pe: bool) -> None:
        super().__init__()
        self.self_attn = Attention(embed_dim, num_heads)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.cross_attn_token_to_image = Attention(embed_dim, num_heads, downsample_rate=2)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = MLP(embed_dim, mlp_dim, embed_dim, num_layers=2, activation=nn.ReLU)
        self.norm3 = nn.LayerNorm(embed_dim)
        self.norm4 = nn.LayerNorm(embed_dim)
        self.cross_attn_image_to_token = Attention(embed_dim, num_heads, downsample_rate=2)
        self.skip_first_layer_pe = skip_first_layer_pe

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, query_pe: torch.Tensor, key_pe: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # queries: [B, Nt, C] tokens; keys: [B, HW, C] image cells
        if self.skip_first_layer_pe:
            # the first layer's tokens are their own positions: replace, no residual
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.norm1(queries)

        k = keys + key_pe
        queries = self.norm2(queries + self.cross_attn_token_to_image(queries + query_pe, k, keys))
        queries = self.norm3(queries + self.mlp(queries))

        # the image cells query the updated tokens (keys unchanged so far, so `k` still holds keys + pe)
        keys = self.norm4(keys + self.cross_attn_image_to_token(k, queries + query_pe, queries))
        return queries, keys


class TwoWayTransformer(nn.Module):
    """`depth` two-way blocks and a final token-to-image attention."""

    def __init__(self, depth: int = 2, embed_dim: int = 256, num_heads: int = 8, mlp_dim: int = 2048) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TwoWayAttentionBlock(embed_dim, num_heads, mlp_dim, skip_first_layer_pe=(i == 0)) for i in range(depth)
        )
        self.final_attn_token_to_image = Attention(embed_dim, num_heads, downsample_rate=2)
        self.norm_final_attn = nn.LayerNorm(embed_dim)

    def forward(
        self, image: torch.Tensor, image_pe: torch.Tensor, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # image: [B, C, H, W], image_pe: [B or 1, C, H, W], tokens: [B, Nt, C]
        # -> tokens [B, Nt, C], image cells [B, HW, C]
        keys = image.flatten(2).transpose(1, 2)
        key_pe = image_pe.flatten(2).transpose(1, 2)
        queries = tokens
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, key_pe)
        attn = self.final_attn_token_to_image(queries + tokens, keys + key_pe, keys)
        return self.norm_final_attn(queries + attn), keys
