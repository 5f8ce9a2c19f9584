"""image.segment with SAM 2.1 tiny on torch: the same answers as the onnxruntime route
(craftai_infer.pipelines.segment_sam), with everything after decoding on the device.

The picture is decoded on the CPU; from there the square 1024² antialiased resize, the ImageNet
normalisation, the encoder, the decoder, the bilinear upscale of the low-res logits to the
picture's size and the threshold run on the device; only the boolean mask (and three IoUs)
come back. Embeddings stay on the device, where a session keeps them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from craftai_infer.engines.cuda_graphs import GraphCache
from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines.segment_sam import (
    MASK_THRESHOLD,
    MEAN,
    STD,
    SamMasks,
    SamPrompt,
    check_picture,
    encode_prompt,
    order_by_score,
)
from craftai_models.sam2.contract import IMAGE_SIZE, LOW_RES
from craftai_models.sam2.model import Sam2ImageModel, build_sam21_tiny

DECODER_FEEDS = ("point_coords", "point_labels", "mask_input", "has_mask_input")


@dataclass(frozen=True, eq=False)
class TorchSamEmbedding:
    """The encoder's three outputs for one picture, kept on the device."""

    high_res_feats_0: torch.Tensor  # [1, 32, 256, 256]
    high_res_feats_1: torch.Tensor  # [1, 64, 128, 128]
    image_embed: torch.Tensor  # [1, 256, 64, 64]
    picture_height: int
    picture_width: int

    def to(self, device: torch.device) -> TorchSamEmbedding:
        """The same embedding on another device (after a fall back to the CPU, sessions keep working)."""
        return TorchSamEmbedding(
            self.high_res_feats_0.to(device),
            self.high_res_feats_1.to(device),
            self.image_embed.to(device),
            self.picture_height,
            self.picture_width,
        )

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.high_res_feats_0, self.high_res_feats_1, self.image_embed)
        )


def load_network(weights: Path, device: str) -> Sam2ImageModel:
    from safetensors.torch import load_file

    net = build_sam21_tiny(load_file(str(weights)))
    return net.to(device).eval()


class SamTorchRunner:
    """The converted network on one device; `encoder_autocast` None runs the encoder in fp32.

    On a CUDA device the encoder (per batch size) and the decoder (per number of prompt points)
    run as CUDA graphs unless `graphs` is False; `warm_up()` captures the common shapes at load.
    """

    def __init__(
        self, net: Sam2ImageModel, device: str, *, encoder_autocast: torch.dtype | None = None, graphs: bool = True
    ) -> None:
        self.net = net
        self.device = torch.device(device)
        self.encoder_autocast = encoder_autocast
        self._mean = torch.as_tensor(MEAN, device=self.device).view(1, 3, 1, 1)
        self._std = torch.as_tensor(STD, device=self.device).view(1, 3, 1, 1)
        self._staging = HostStaging(self.device)
        self._encoder_graphs: GraphCache | None = None
        self._decoder_graphs: GraphCache | None = None
        if graphs and self.device.type == "cuda":
            self._encoder_graphs = GraphCache(self._encode_network, self.device, capacity=4)
            self._decoder_graphs = GraphCache(self.net.decode, self.device, capacity=32)

    def _encode_network(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with self._autocast(self.encoder_autocast):
            feats_0, feats_1, embed = self.net.encode(x)
        return feats_0.float(), feats_1.float(), embed.float()

    def warm_up(self, steps: Callable[[str], None] | None = None) -> None:
        """Capture the shapes every picture and the first clicks use (no-op without graphs)."""
        if self._encoder_graphs is None:
            return
        say = steps or (lambda _message: None)
        say("capturing the encoder")
        picture = np.zeros((64, 64, 3), np.uint8)
        embedding = self.encode(picture)
        for points in (1, 2, 3, 4):
            say(f"capturing the decoder for {points} point(s)")
            self.decode(embedding, SamPrompt(points=[(8.0, 8.0)] * points, labels=[1] * points))

    def _autocast(self, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def preprocess(self, picture: npt.NDArray[Any]) -> torch.Tensor:
        """RGB uint8 HxWx3 -> [1, 3, 1024, 1024] normalised, on the device (antialiased when shrinking,
        as torchvision's Resize on a tensor, which calls this same interpolation)."""
        pixels = self._staging.upload(check_picture(picture))
        x = pixels.permute(2, 0, 1)[None].float() / 255.0
        x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False, antialias=True)
        return (x - self._mean) / self._std

    def encode_batch(self, pictures: Sequence[npt.NDArray[Any]]) -> list[TorchSamEmbedding]:
        """The encoder once for several pictures (one batch on the device)."""
        with torch.inference_mode():
            x = torch.cat([self.preprocess(p) for p in pictures])
            if self._encoder_graphs is not None:
                outputs = self._encoder_graphs.run(len(pictures), [x])
                feats_0, feats_1, embed = (t.clone() for t in outputs)  # kept by sessions past the next replay
            else:
                feats_0, feats_1, embed = self._encode_network(x)
        return [
            TorchSamEmbedding(
                feats_0[i : i + 1], feats_1[i : i + 1], embed[i : i + 1], int(p.shape[0]), int(p.shape[1])
            )
            for i, p in enumerate(pictures)
        ]

    def encode(self, picture: npt.NDArray[Any]) -> TorchSamEmbedding:
        return self.encode_batch([picture])[0]

    def decode_raw(self, embedding: TorchSamEmbedding, prompt: SamPrompt) -> tuple[torch.Tensor, torch.Tensor]:
        """low-res logits [3, 256, 256] and IoUs [3], on the device."""
        feeds = encode_prompt(prompt, embedding.picture_height, embedding.picture_width)
        d = self.device
        if embedding.image_embed.device != d:
            embedding = embedding.to(d)
        with torch.inference_mode():
            inputs = [
                embedding.image_embed,
                embedding.high_res_feats_0,
                embedding.high_res_feats_1,
                *(torch.from_numpy(feeds[k]).to(d, non_blocking=True) for k in DECODER_FEEDS),
            ]
            if self._decoder_graphs is not None:
                masks, ious = self._decoder_graphs.run((1, inputs[3].shape[1]), inputs)
            else:
                masks, ious = self.net.decode(*inputs)
        return masks[0], ious[0]

    def decode(self, embedding: TorchSamEmbedding, prompt: SamPrompt, *, all_masks: bool = False) -> SamMasks:
        low_res, ious = self.decode_raw(embedding, prompt)
        return self._answer(embedding, low_res, ious, all_masks)

    def decode_batch(self, items: Sequence[tuple[TorchSamEmbedding, SamPrompt, bool]]) -> list[SamMasks]:
        """Prompts on several pictures (or one) in one decoder call; every prompt must have as many
        points (`prompt_points`): the batcher groups them so."""
        if len(items) == 1:
            embedding, prompt, all_masks = items[0]
            return [self.decode(embedding, prompt, all_masks=all_masks)]
        d = self.device
        embeddings = [e if e.image_embed.device == d else e.to(d) for e, _, _ in items]
        feeds = [
            encode_prompt(p, e.picture_height, e.picture_width) for e, (_, p, _) in zip(embeddings, items, strict=True)
        ]
        with torch.inference_mode():
            inputs = [
                torch.cat([e.image_embed for e in embeddings]),
                torch.cat([e.high_res_feats_0 for e in embeddings]),
                torch.cat([e.high_res_feats_1 for e in embeddings]),
                *(
                    torch.from_numpy(np.concatenate([f[k] for f in feeds])).to(d, non_blocking=True)
                    for k in DECODER_FEEDS
                ),
            ]
            if self._decoder_graphs is not None:
                masks, ious = self._decoder_graphs.run((len(items), inputs[3].shape[1]), inputs)
            else:
                masks, ious = self.net.decode(*inputs)
            return [
                self._answer(e, masks[i], ious[i], all_masks)
                for i, (e, (_, _, all_masks)) in enumerate(zip(embeddings, items, strict=True))
            ]

    def _answer(
        self, embedding: TorchSamEmbedding, low_res: torch.Tensor, ious: torch.Tensor, all_masks: bool
    ) -> SamMasks:
        """One prompt's decoder outputs -> masks at the picture's size (upscaled and thresholded here)."""
        scores = ious.float().cpu().numpy()  # the one read-back the choice needs
        chosen = order_by_score(scores, all_masks=all_masks)
        index = torch.from_numpy(chosen).to(self.device)
        with torch.inference_mode():
            picked = low_res.index_select(0, index)  # [K, 256, 256]
            up = F.interpolate(
                picked[:, None],
                size=(embedding.picture_height, embedding.picture_width),
                mode="bilinear",
                align_corners=False,
            )[:, 0]
            masks = up > MASK_THRESHOLD
            counts = masks.flatten(1).sum(dim=1)
            host_masks = masks.cpu().numpy()
            low = picked.float().cpu().numpy().reshape(-1, LOW_RES, LOW_RES)
        area = embedding.picture_height * embedding.picture_width
        return SamMasks(
            masks=host_masks,
            ious=scores[chosen],
            low_res=low,
            indices=chosen,
            fractions=counts.cpu().numpy().astype(np.float64) / area,
        )
