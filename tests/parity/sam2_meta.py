"""Meta's SAM 2.1 hiera tiny (test-only dependency `sam2`) with every weight randomised, run the way
`SAM2ImagePredictor` runs it, so that this project's network can be compared with it.

`SAM2ImagePredictor` itself imports torchvision (which cannot load beside the CPU torch pinned
here), so its two steps are followed with the model's own modules: `set_image` (forward_image,
flatten, add no_mem_embed) and `_predict` (prompt encoder with boxes as points 2/3, mask decoder).
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch
from torch import nn

CONFIG = "configs/sam2.1/sam2.1_hiera_t.yaml"
SEED = 20240729

# Meta's modules carry no type information; they are handled as Any (imported through importlib so
# that this file type-checks the same with or without a mypy override for `sam2`).
MetaModel = Any


def _sam2(module: str) -> Any:
    return importlib.import_module(f"sam2.{module}")


def build_meta_sam21_tiny(seed: int = SEED) -> MetaModel:
    """Meta's `SAM2Base` for sam2.1 tiny, eval mode, every parameter and buffer randomised from `seed`."""
    model = _sam2("build_sam").build_sam2(CONFIG, ckpt_path=None, device="cpu", mode="eval")
    randomise_(model, seed)
    return model


def randomise_(model: MetaModel, seed: int) -> None:
    """Fill every floating parameter and buffer with seeded values at sensible scales.

    Norm weights near 1, matrix weights ~ 1/sqrt(fan_in), token/point embeddings ~ N(0, 1), the
    rest (biases, position tables) ~ N(0, 0.1): activations stay in a realistic range and every
    tensor differs from every other (so an exporter cannot merge two of them).
    """
    gen = torch.Generator().manual_seed(seed)
    norm_types = (nn.LayerNorm, _sam2("modeling.sam2_utils").LayerNorm2d)
    with torch.no_grad():
        for module in model.modules():
            tensors = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
            for name, t in tensors:
                if not t.is_floating_point():
                    continue
                noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
                if isinstance(module, norm_types):
                    value = 1.0 + 0.1 * noise if name == "weight" else 0.1 * noise
                elif isinstance(module, nn.Embedding) or "gaussian" in name:
                    value = noise
                elif t.ndim >= 2 and name == "weight":
                    value = noise / math.sqrt(t.numel() / t.shape[0])
                else:
                    value = 0.1 * noise
                t.copy_(value.to(t.dtype))


@torch.no_grad()
def meta_encode(model: MetaModel, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`SAM2ImagePredictor.set_image` on a preprocessed batch: (high_res_0, high_res_1, image_embed)."""
    backbone_out = model.forward_image(image)
    _, vision_feats, _, feat_sizes = model._prepare_backbone_features(backbone_out)
    vision_feats[-1] = vision_feats[-1] + model.no_mem_embed
    n = image.shape[0]
    feats = [f.permute(1, 2, 0).reshape(n, -1, *size) for f, size in zip(vision_feats, feat_sizes, strict=True)]
    return feats[0], feats[1], feats[2]


@torch.no_grad()
def meta_decode(
    model: MetaModel,
    features: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    coords: torch.Tensor,
    labels: torch.Tensor,
    mask_input: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`SAM2ImagePredictor._predict(multimask_output=True, return_logits=True)`: low-res logits
    [L, 3, 256, 256] (clamped ±32 as the predictor returns them) and IoUs [L, 3].

    coords/labels are in the 1024² frame, boxes already turned into points labelled 2 and 3.
    """
    high_res_0, high_res_1, image_embed = features
    sparse, dense = model.sam_prompt_encoder(points=(coords, labels), boxes=None, masks=mask_input)
    batched = coords.shape[0] > 1 and image_embed.shape[0] == 1
    masks, iou, _, _ = model.sam_mask_decoder(
        image_embeddings=image_embed,
        image_pe=model.sam_prompt_encoder.get_dense_pe(),
        sparse_prompt_embeddings=sparse,
        dense_prompt_embeddings=dense,
        multimask_output=True,
        repeat_image=batched,
        high_res_features=[high_res_0, high_res_1],
    )
    return torch.clamp(masks, -32.0, 32.0), iou
