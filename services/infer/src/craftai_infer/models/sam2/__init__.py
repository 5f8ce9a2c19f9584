"""SAM 2.1 hiera tiny (Ravi et al. 2024), the image path, in PyTorch.

Parts, one module each: `hiera` (the trunk), `fpn_neck`, `image_encoder` (trunk + neck),
`prompt_encoder`, `two_way_transformer`, `mask_decoder`; `model` puts them together behind the
samexporter contract (`encode`, `decode`). Parameter names follow Meta's checkpoints, with
`sam_prompt_encoder`/`sam_mask_decoder` shortened to `prompt_encoder`/`mask_decoder`.
"""

from .model import (
    IMAGE_SIZE,
    LOW_RES_MASK_SIZE,
    MASK_LOGIT_CLAMP,
    Sam2ImageModel,
    build_sam21_tiny,
    state_dict_from_meta,
)

__all__ = [
    "IMAGE_SIZE",
    "LOW_RES_MASK_SIZE",
    "MASK_LOGIT_CLAMP",
    "Sam2ImageModel",
    "build_sam21_tiny",
    "state_dict_from_meta",
]
