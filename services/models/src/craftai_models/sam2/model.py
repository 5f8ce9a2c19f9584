"""SAM 2.1 hiera tiny, image path only, with the samexporter encoder/decoder contract.

`encode` is what `encoder.onnx` computes: image encoder, the decoder's two 1x1 convs on the two fine
FPN levels, and `no_mem_embed` added to the stride-16 level (SAM 2 adds it to a frame without
memory). `decode` is what `decoder.onnx` computes: prompt encoder, mask decoder, the three
multimask outputs (tokens 1-3) and their sigmoid IoUs, logits clamped to ±32. `decode_single`
answers one mask as Meta's `SAM2ImagePredictor.predict(multimask_output=False)` does: the
single-mask token 0 when it is stable, else the best of the three (the published decoder graph
computes token 0 too, and slices it off; the converter recovers its weights). `attend` then
`predict_masks` is `decode` in two steps (the transformer and the IoU head, then the masks'
upscaling), for a caller that makes the masks of some prompts only. No memory, video or training
code.

Batching (beyond the published graphs, which take one picture and one prompt set): `encode` takes
N pictures; `decode` takes L prompt sets against one picture (embeddings of batch 1) or against L
pictures (batch L), each with its own `has_mask_input`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .contract import IMAGE_SIZE
from .contract import LOW_RES as LOW_RES_MASK_SIZE  # mask logits and mask_input: a quarter of the frame
from .image_encoder import ImageEncoder
from .mask_decoder import MaskDecoder, single_mask_by_stability
from .prompt_encoder import PromptEncoder

EMBED_DIM = 256
MASK_LOGIT_CLAMP = 32.0  # the exported decoder clamps its logits to ±32

# Meta's checkpoint prefixes for the parts this network has (everything else is memory/video).
META_PREFIXES: dict[str, str] = {
    "image_encoder.": "image_encoder.",
    "sam_prompt_encoder.": "prompt_encoder.",
    "sam_mask_decoder.": "mask_decoder.",
    "no_mem_embed": "no_mem_embed",
}
# Present in Meta's checkpoint under those prefixes but unused by the image path.
META_UNUSED_PREFIXES = ("sam_mask_decoder.pred_obj_score_head.",)


class Sam2ImageModel(nn.Module):
    """The image path of SAM 2.1: `encode` once per picture, `decode` per prompt."""

    def __init__(self) -> None:
        super().__init__()
        embed_grid = IMAGE_SIZE // 16
        self.image_encoder = ImageEncoder(d_model=EMBED_DIM, scalp=1)
        self.prompt_encoder = PromptEncoder(EMBED_DIM, (embed_grid, embed_grid), (IMAGE_SIZE, IMAGE_SIZE))
        self.mask_decoder = MaskDecoder(EMBED_DIM)
        self.no_mem_embed = nn.Parameter(torch.zeros(1, 1, EMBED_DIM))

    def encode(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """image f32[N,3,1024,1024] (normalised) -> high_res_feats_0 [N,32,256,256],
        high_res_feats_1 [N,64,128,128], image_embed [N,256,64,64]."""
        if image.ndim != 4 or image.shape[1:] != (3, IMAGE_SIZE, IMAGE_SIZE):
            raise ValueError(f"image must be [N, 3, {IMAGE_SIZE}, {IMAGE_SIZE}], got {list(image.shape)}")
        level0, level1, level2 = self.image_encoder(image)
        high_res_0, high_res_1 = self.mask_decoder.project_high_res(level0, level1)
        image_embed = level2 + self.no_mem_embed.reshape(1, -1, 1, 1)
        return high_res_0, high_res_1, image_embed

    def decode(  # noqa: PLR0917 - the decoder graph's seven inputs, in its order
        self,
        image_embed: torch.Tensor,
        high_res_feats_0: torch.Tensor,
        high_res_feats_1: torch.Tensor,
        point_coords: torch.Tensor,
        point_labels: torch.Tensor,
        mask_input: torch.Tensor,
        has_mask_input: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts -> masks f32[L,3,256,256] (logits, clamped ±32), iou_predictions f32[L,3].

        point_coords [L,P,2] in the 1024² frame (x, y); point_labels [L,P]: 1 fg, 0 bg, 2/3 box
        corners, -1 padding; mask_input [L,1,256,256] previous logits; has_mask_input [L] (1 uses
        mask_input, 0 the no-mask embedding). One padding point is appended to every set.
        """
        masks, iou = self.decode_tokens(
            image_embed, high_res_feats_0, high_res_feats_1, point_coords, point_labels, mask_input, has_mask_input
        )
        return masks[:, 1:].clamp(-MASK_LOGIT_CLAMP, MASK_LOGIT_CLAMP), iou[:, 1:]

    def decode_single(self, *feeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode`'s seven inputs, in its order -> Meta's single-mask answer: masks f32[L,1,256,256]
        (clamped ±32), iou_predictions f32[L,1] (mask_decoder.single_mask_by_stability)."""
        masks, iou = single_mask_by_stability(*self.decode_tokens(*feeds))
        return masks.clamp(-MASK_LOGIT_CLAMP, MASK_LOGIT_CLAMP), iou

    def decode_tokens(self, *feeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode`'s seven inputs, in its order -> all four mask tokens, unclamped: masks
        [L,4,256,256], IoUs [L,4] (token 0 the single-mask answer, 1-3 the multimask ones)."""
        image_embed, high_res_feats_0, high_res_feats_1 = feeds[:3]
        sparse, dense = self._prompt_embeddings(*feeds)
        masks: torch.Tensor
        iou: torch.Tensor
        masks, iou = self.mask_decoder(
            image_embed,
            self.prompt_encoder.dense_positional_encoding(),
            sparse,
            dense,
            high_res_feats_0=high_res_feats_0,
            high_res_feats_1=high_res_feats_1,
        )
        return masks, iou

    def attend(self, *feeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`decode` in two steps, the first: its seven inputs -> image cells [L,4096,256] (in the
        dtype of the mask head's inputs: what `predict_masks` reads), the three multimask tokens'
        32-vectors [L,3,32] and their IoUs [L,3]. A caller that keeps only masks above a predicted
        IoU (the automatic mask generator) upscales only those points' masks."""
        sparse, dense = self._prompt_embeddings(*feeds)
        decoder = self.mask_decoder
        cells, mask_tokens_out, iou = decoder.attend(
            feeds[0], self.prompt_encoder.dense_positional_encoding(), sparse, dense
        )
        hyper = decoder.hypernetworks(mask_tokens_out, range(1, decoder.num_mask_tokens))
        return cells.to(hyper.dtype), hyper, iou[:, 1:]

    def predict_masks(
        self,
        cells: torch.Tensor,
        hyper: torch.Tensor,
        high_res_feats_0: torch.Tensor,
        high_res_feats_1: torch.Tensor,
    ) -> torch.Tensor:
        """The second step: `attend`'s cells and 32-vectors of L points, the picture's high-res
        features (batch 1) -> masks f32[L,3,256,256] as `decode` answers them (logits clamped ±32)."""
        masks = self.mask_decoder.predict_masks(
            cells, hyper, high_res_feats_0=high_res_feats_0, high_res_feats_1=high_res_feats_1
        )
        return masks.clamp(-MASK_LOGIT_CLAMP, MASK_LOGIT_CLAMP)

    def _prompt_embeddings(self, *feeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode`'s seven inputs checked -> the prompt encoder's sparse [L, P+1, C] and dense
        [L, C, 64, 64] embeddings."""
        image_embed, _, _, point_coords, point_labels, mask_input, has_mask_input = feeds
        n = point_coords.shape[0]
        if point_coords.ndim != 3 or point_coords.shape[2] != 2 or point_labels.shape != point_coords.shape[:2]:
            raise ValueError(
                f"point_coords must be [L, P, 2] and point_labels [L, P], got {list(point_coords.shape)} "
                f"and {list(point_labels.shape)}"
            )
        if mask_input.shape != (n, 1, LOW_RES_MASK_SIZE, LOW_RES_MASK_SIZE) or has_mask_input.shape != (n,):
            raise ValueError(
                f"mask_input must be [{n}, 1, 256, 256] and has_mask_input [{n}], got {list(mask_input.shape)} "
                f"and {list(has_mask_input.shape)}"
            )
        if image_embed.shape[0] not in (1, n):
            raise ValueError(f"image embeddings have batch {image_embed.shape[0]}; expected 1 or {n}")
        sparse = self.prompt_encoder.embed_points(point_coords, point_labels)  # [L, P+1, C]
        dense = self.prompt_encoder.embed_mask(mask_input, has_mask_input)  # [L, C, 64, 64]
        return sparse, dense


def state_dict_from_meta(meta: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Meta's SAM 2.1 state_dict (checkpoint "model" or `SAM2Base.state_dict()`) -> this network's keys.

    Memory/video weights and the object-score head are dropped; everything this network has is kept.
    """
    out: dict[str, torch.Tensor] = {}
    for key, value in meta.items():
        if key.startswith(META_UNUSED_PREFIXES):
            continue
        for meta_prefix, prefix in META_PREFIXES.items():
            if key.startswith(meta_prefix):
                out[prefix + key[len(meta_prefix) :]] = value
                break
    return out


def build_sam21_tiny(state_dict: Mapping[str, torch.Tensor] | None = None) -> Sam2ImageModel:
    """The network in eval mode, with `state_dict` (this network's keys) loaded strictly when given."""
    model = Sam2ImageModel()
    if state_dict is not None:
        model.load_state_dict(dict(state_dict), strict=True)
    return model.eval()
