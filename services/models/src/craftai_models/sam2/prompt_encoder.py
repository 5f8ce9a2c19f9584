"""SAM's prompt encoder: points and box corners to sparse tokens, a mask to a dense map.

Points are encoded with random Fourier features (Tancik et al. 2020) of their position in the
1024² input frame plus a learned embedding per label: 0 background, 1 foreground, 2 box top-left,
3 box bottom-right; label -1 marks padding and gets the "not a point" embedding instead of a
position. One padding point is always appended, as Meta's predictor does when no box tensor is
given and as the exported decoder graph does. A previous low-res mask (logits, 256²) is reduced to
the embedding grid (64²) by a small conv stack; without one, a learned "no mask" vector is used.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .layers import LayerNorm2d

NUM_POINT_LABELS = 4  # background, foreground, box top-left, box bottom-right
PADDING_LABEL = -1.0


class RandomFourierEncoding(nn.Module):
    """Positions in [0, 1]² -> [sin(2π(2p-1)G), cos(2π(2p-1)G)] with a fixed Gaussian G [2, C/2]."""

    positional_encoding_gaussian_matrix: torch.Tensor

    def __init__(self, num_feats: int = 128) -> None:
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", torch.randn(2, num_feats))

    def encode(self, coords: torch.Tensor) -> torch.Tensor:
        # coords: [..., 2] as (x, y) in [0, 1] -> [..., 2 * num_feats]
        proj = (2 * coords - 1) @ self.positional_encoding_gaussian_matrix
        proj = 2 * math.pi * proj
        return torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1)

    def grid(self, h: int, w: int) -> torch.Tensor:
        """Encoding of the centres of an h x w grid: [C, h, w]."""
        device = self.positional_encoding_gaussian_matrix.device
        y = (torch.arange(h, dtype=torch.float32, device=device) + 0.5) / h
        x = (torch.arange(w, dtype=torch.float32, device=device) + 0.5) / w
        xy = torch.stack([x[None, :].expand(h, w), y[:, None].expand(h, w)], dim=-1)  # [h, w, 2]
        return self.encode(xy).permute(2, 0, 1)


class PromptEncoder(nn.Module):
    """Sparse (points, box corners) and dense (mask) prompt embeddings for the mask decoder."""

    def __init__(
        self,
        embed_dim: int = 256,
        image_embedding_size: tuple[int, int] = (64, 64),
        input_image_size: tuple[int, int] = (1024, 1024),
        mask_in_chans: int = 16,
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.image_embedding_size = image_embedding_size
        # (1/W, 1/H) of the input frame, kept on the device: no host-to-device copy per prompt
        # (a CUDA graph cannot record one); 1/1024 is exact, so this equals dividing.
        self.pixel_scale: torch.Tensor
        self.register_buffer(
            "pixel_scale", torch.tensor([1.0 / input_image_size[1], 1.0 / input_image_size[0]]), persistent=False
        )
        self.input_image_size = input_image_size
        self.pe_layer = RandomFourierEncoding(embed_dim // 2)
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, embed_dim) for _ in range(NUM_POINT_LABELS))
        self.not_a_point_embed = nn.Embedding(1, embed_dim)
        # [L, 1, 256, 256] -> [L, 4, 128, 128] -> [L, 16, 64, 64] -> [L, 256, 64, 64]
        self.mask_downscaling = nn.Sequential(
            nn.Conv2d(1, mask_in_chans // 4, kernel_size=2, stride=2),
            LayerNorm2d(mask_in_chans // 4),
            nn.GELU(),
            nn.Conv2d(mask_in_chans // 4, mask_in_chans, kernel_size=2, stride=2),
            LayerNorm2d(mask_in_chans),
            nn.GELU(),
            nn.Conv2d(mask_in_chans, embed_dim, kernel_size=1),
        )
        self.no_mask_embed = nn.Embedding(1, embed_dim)

    def point_embedding(self, label: int) -> torch.Tensor:
        """[1, C]: the learned embedding added to points with this label (0..3)."""
        table = self.point_embeddings[label]
        assert isinstance(table, nn.Embedding)
        return table.weight

    def dense_positional_encoding(self) -> torch.Tensor:
        """[1, C, 64, 64]: the encoding of every image-embedding cell, added to the image keys."""
        return self.pe_layer.grid(*self.image_embedding_size).unsqueeze(0)

    def embed_points(self, coords: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """[L, P, 2] pixel coords (x, y) in the 1024² frame, [L, P] labels -> [L, P + 1, C].

        Labels are compared exactly (float inputs): -1 is padding; 0..3 add their embedding; any
        other value keeps the bare position encoding (what both Meta's code and the graph do).
        """
        n = coords.shape[0]
        coords = torch.cat([coords + 0.5, coords.new_zeros(n, 1, 2)], dim=1)  # pixel centres + pad point
        labels = torch.cat([labels, labels.new_full((n, 1), PADDING_LABEL)], dim=1)
        emb = self.pe_layer.encode(coords * self.pixel_scale)  # [L, P+1, C]
        labels = labels.unsqueeze(-1)  # [L, P+1, 1]
        emb = emb * (labels != PADDING_LABEL) + self.not_a_point_embed.weight * (labels == PADDING_LABEL)
        for i in range(NUM_POINT_LABELS):
            emb = emb + self.point_embedding(i) * (labels == i)
        return emb

    def embed_mask(self, mask_input: torch.Tensor, has_mask_input: torch.Tensor) -> torch.Tensor:
        """[L, 1, 256, 256] logits, [L] weight in {0, 1} -> [L, C, 64, 64].

        A blend (has * mask + (1 - has) * no_mask), not a branch, exactly like the exported graph,
        so the mask path runs even when unused; the weight is per prompt set.
        """
        has = has_mask_input.reshape(-1, 1, 1, 1)
        no_mask = self.no_mask_embed.weight.reshape(1, -1, 1, 1)
        downscaled: torch.Tensor = self.mask_downscaling(mask_input)
        return has * downscaled + (1 - has) * no_mask
