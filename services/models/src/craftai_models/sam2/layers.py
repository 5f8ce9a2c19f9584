"""Small building blocks shared by the parts of SAM 2: the per-token MLP and the channel LayerNorm."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """`num_layers` Linear layers with an activation between them (not after the last).

    The parameter names (`layers.N.weight`) follow Meta's checkpoints so that their weights load as
    they are; the Hiera blocks use GELU, the mask decoder ReLU.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        num_layers: int,
        *,
        activation: type[nn.Module] = nn.ReLU,
        sigmoid_output: bool = False,
    ) -> None:
        super().__init__()
        dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.act = activation()
        self.sigmoid_output = sigmoid_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in_dim] -> [..., out_dim]
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = self.act(x)
        return torch.sigmoid(x) if self.sigmoid_output else x


class LayerNorm2d(nn.Module):
    """LayerNorm over the channel axis of a [B,C,H,W] map (as in ConvNeXt), eps 1e-6.

    Written out (mean, variance, rsqrt) rather than through `F.layer_norm` on a permuted copy
    because that is the arithmetic Meta's modules and the exported graphs do; the parity tests
    compare against both.
    """

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C, H, W]
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention, [B, heads, Nq, d] x [B, heads, Nk, d] -> [B, heads, Nq, d].

    One place for the call, so that a device-specific choice (kernel, precision) is made once.
    """
    return F.scaled_dot_product_attention(q, k, v)
