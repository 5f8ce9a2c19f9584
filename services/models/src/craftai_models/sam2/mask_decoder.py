"""SAM 2's mask decoder: output tokens + prompt tokens through the two-way transformer, then masks.

Six learned output tokens lead the sequence, in this order: object score, IoU, and four mask
tokens (0 = the single-mask answer, 1-3 = the three multimask answers). After the transformer the
image cells are upscaled 4x by two transposed convs, with the stride-8 and stride-4 features of the
image encoder added in (SAM 2's high-resolution path), and each mask token, through its own MLP
("hypernetwork"), becomes a 32-vector dotted with every upscaled cell. The IoU token predicts one
quality per mask (sigmoid). The object-score head is not part of this network: the image path
never returns it and the published decoder graph does not contain it.

One mask rather than three (`single_mask_by_stability`): Meta's rule for SAM 2
(`dynamic_multimask_via_stability`, switched on by `build_sam2`): token 0's mask when it is stable,
i.e. when thresholding its logits at +0.05 and at -0.05 selects nearly the same pixels (the area
above +0.05 is at least 98 % of the area above -0.05); otherwise the best of tokens 1-3 by
predicted IoU.
"""

from __future__ import annotations

import torch
from torch import nn

from .contract import STABILITY_DELTA, STABILITY_THRESHOLD
from .layers import MLP, LayerNorm2d
from .two_way_transformer import TwoWayTransformer

NUM_MULTIMASK_OUTPUTS = 3


def stability_scores(logits: torch.Tensor, delta: float = STABILITY_DELTA) -> torch.Tensor:
    """[..., h, w] logits -> [...]: area(logits > delta) / area(logits > -delta), 1 where nothing is above -delta."""
    flat = logits.flatten(-2)
    inner = (flat > delta).sum(dim=-1).float()
    outer = (flat > -delta).sum(dim=-1).float()
    return torch.where(outer > 0, inner / outer.clamp(min=1.0), torch.ones_like(inner))


def single_mask_by_stability(masks: torch.Tensor, iou: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """All four tokens' masks [L, 4, h, w] and IoUs [L, 4] -> Meta's one answer: masks [L, 1, h, w],
    IoUs [L, 1]. Token 0 where it is stable, else the first of tokens 1-3 with the highest IoU.
    Device ops only (no read-back), so that it runs inside a captured CUDA graph."""
    best = iou[:, 1:].argmax(dim=1) + 1  # [L], first of equal maxima (as torch.argmax in Meta's code)
    stable = stability_scores(masks[:, 0]) >= STABILITY_THRESHOLD  # [L]
    token = torch.where(stable, torch.zeros_like(best), best)  # [L]
    h, w = masks.shape[-2:]
    chosen = masks.gather(1, token.view(-1, 1, 1, 1).expand(-1, 1, h, w))
    return chosen, iou.gather(1, token.view(-1, 1))


class MaskDecoder(nn.Module):
    """Tokens + image embedding (+ dense prompt) -> 4 low-res mask logits and 4 IoU predictions."""

    def __init__(self, transformer_dim: int = 256, iou_head_hidden_dim: int = 256, iou_head_depth: int = 3) -> None:
        super().__init__()
        c = transformer_dim
        self.num_mask_tokens = NUM_MULTIMASK_OUTPUTS + 1
        self.transformer = TwoWayTransformer(depth=2, embed_dim=c, num_heads=8, mlp_dim=2048)
        self.obj_score_token = nn.Embedding(1, c)
        self.iou_token = nn.Embedding(1, c)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, c)
        # [L, 256, 64, 64] -> [L, 64, 128, 128] -> [L, 32, 256, 256]
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(c, c // 4, kernel_size=2, stride=2),
            LayerNorm2d(c // 4),
            nn.GELU(),
            nn.ConvTranspose2d(c // 4, c // 8, kernel_size=2, stride=2),
            nn.GELU(),
        )
        # Applied once per picture by the encoder side (SAM2Base.forward_image), not per click.
        self.conv_s0 = nn.Conv2d(c, c // 8, kernel_size=1)  # stride-4 FPN level -> 32 channels
        self.conv_s1 = nn.Conv2d(c, c // 4, kernel_size=1)  # stride-8 FPN level -> 64 channels
        self.output_hypernetworks_mlps = nn.ModuleList(MLP(c, c, c // 8, 3) for _ in range(self.num_mask_tokens))
        self.iou_prediction_head = MLP(
            c, iou_head_hidden_dim, self.num_mask_tokens, iou_head_depth, sigmoid_output=True
        )

    def project_high_res(self, level0: torch.Tensor, level1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """FPN levels [B,256,256²], [B,256,128²] -> high_res_feats_0 [B,32,256²], high_res_feats_1 [B,64,128²]."""
        return self.conv_s0(level0), self.conv_s1(level1)

    def output_tokens(self) -> torch.Tensor:
        """[6, C]: object score, IoU, mask 0..3 (the order of the exported graph's token constant)."""
        return torch.cat([self.obj_score_token.weight, self.iou_token.weight, self.mask_tokens.weight], dim=0)

    def forward(
        self,
        image_embed: torch.Tensor,
        image_pe: torch.Tensor,
        sparse: torch.Tensor,
        dense: torch.Tensor,
        *,
        high_res_feats_0: torch.Tensor,
        high_res_feats_1: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """All four mask tokens: masks [L, 4, 256, 256], IoU [L, 4].

        image_embed/high_res_feats have batch 1 (one picture for every prompt set) or L.
        sparse: [L, Np, C]; dense: [L, C, 64, 64]; image_pe: [1, C, 64, 64].
        """
        cells, mask_tokens_out, iou = self.attend(image_embed, image_pe, sparse, dense)
        hyper = self.hypernetworks(mask_tokens_out, range(self.num_mask_tokens))
        masks = self.predict_masks(cells, hyper, high_res_feats_0=high_res_feats_0, high_res_feats_1=high_res_feats_1)
        return masks, iou

    def attend(
        self, image_embed: torch.Tensor, image_pe: torch.Tensor, sparse: torch.Tensor, dense: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The two-way transformer and the IoU head: image cells [L, hw, C], the four mask tokens'
        outputs [L, 4, C], IoU [L, 4]. Everything the masks need but their upscaling: a caller that
        filters by predicted IoU first upscales only the masks it keeps (`predict_masks`)."""
        n = sparse.shape[0]
        tokens = torch.cat([self.output_tokens().unsqueeze(0).expand(n, -1, -1), sparse], dim=1)  # [L, 6+Np, C]
        src = image_embed + dense  # [L, C, h, w]
        hs, cells = self.transformer(src, image_pe, tokens)
        return cells, hs[:, 2 : 2 + self.num_mask_tokens, :], self.iou_prediction_head(hs[:, 1, :])

    def hypernetworks(self, mask_tokens_out: torch.Tensor, tokens: range) -> torch.Tensor:
        """Mask tokens' outputs [L, 4, C] -> the 32-vectors of the tokens asked [L, T, 32] (each token its own MLP)."""
        mlps = self.output_hypernetworks_mlps
        return torch.stack([mlps[i](mask_tokens_out[:, i, :]) for i in tokens], dim=1)

    def predict_masks(
        self,
        cells: torch.Tensor,
        hyper: torch.Tensor,
        *,
        high_res_feats_0: torch.Tensor,
        high_res_feats_1: torch.Tensor,
    ) -> torch.Tensor:
        """Image cells [L, hw, C] upscaled 4x (the high-resolution features added in) and dotted
        with each token's 32-vector [L, T, 32] -> mask logits [L, T, 4h, 4w]."""
        deconv1, norm1, act1, deconv2, act2 = self.output_upscaling
        b, _, c = cells.shape
        h, w = high_res_feats_1.shape[-2] // 2, high_res_feats_1.shape[-1] // 2
        src = cells.transpose(1, 2).reshape(b, c, h, w)
        up = act1(norm1(deconv1(src) + high_res_feats_1))
        up = act2(deconv2(up) + high_res_feats_0)  # [L, 32, 4h, 4w]
        b, c, h, w = up.shape
        masks: torch.Tensor = (hyper @ up.reshape(b, c, h * w)).reshape(b, -1, h, w)
        return masks
