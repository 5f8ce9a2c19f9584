"""The samexporter encoder/decoder contract of SAM 2 / 2.1 (docs/research/sam21.md), without torch.

What the published `encoder.onnx` and `decoder.onnx` take and give, by name, and what the prepared
torch route is written as: shared by the onnxruntime route, the torch route and the converter.
"""

from __future__ import annotations

IMAGE_SIZE = 1024  # the encoder's square input side
LOW_RES = 256  # the decoder's mask logits and mask_input side, a quarter of the input frame

ENCODER_INPUTS = ("image",)
ENCODER_OUTPUTS = ("high_res_feats_0", "high_res_feats_1", "image_embed")
DECODER_INPUTS = (
    "image_embed",
    "high_res_feats_0",
    "high_res_feats_1",
    "point_coords",
    "point_labels",
    "mask_input",
    "has_mask_input",
)
DECODER_OUTPUTS = ("masks", "iou_predictions")
# What the onnxruntime route's prepared decoder answers besides: Meta's single-mask token (token 0)
# the published graph computes and slices off, its logits [L, 1, 256, 256] (clamped ±32) and its
# predicted IoU [L, 1] (craftai_prepare's sam21_decoder converter adds them).
DECODER_SINGLE_OUTPUTS = ("single_mask", "single_iou_prediction")

# point_labels: a click is 1 (foreground) or 0 (background); a box is two points labelled 2 and 3.
FOREGROUND, BACKGROUND, BOX_TOP_LEFT, BOX_BOTTOM_RIGHT = 1, 0, 2, 3

# The prepared torch route's weights, written by the conversion of both graphs.
WEIGHTS = "sam2_tiny.safetensors"
# The prepared onnxruntime route's graphs: the encoder as published, the decoder with token 0.
PREPARED_ENCODER = "encoder.onnx"
PREPARED_DECODER = "decoder.onnx"

# Meta's single-mask rule (build_sam2's dynamic_multimask_stability_delta and _thresh): token 0
# when area(logits > delta) / area(logits > -delta) is at least the threshold, else the best of 1-3.
STABILITY_DELTA = 0.05
STABILITY_THRESHOLD = 0.98
