"""IS-Net: Qin et al., "Highly Accurate Dichotomous Image Segmentation", ECCV 2022.

The paper's IS-Net has two parts: a ground-truth encoder, used in training only (its intermediate
supervision), and the image segmentation component, which is what runs at inference and what is
written here (section 3.2, figure 3): U²-Net's residual U-blocks (craftai_models.u2netp.RSU) in
U²-Net's six-stage encoder and five-stage decoder, behind an input convolution of stride 2 that
takes the 1024² picture to 512² before the first stage, and six side outputs (no fusion): the
first, at the input's size, is the answer.

Two published checkpoints use it: the authors' general-use one (rembg's isnet-general-use), and
SkyTNT's for anime characters (isnet-anime), trained with a copy of the authors' code that answers
logits (its export applies the sigmoid to the first map; the copy also max-pools the input
convolution's output into a value nothing reads).

BatchNorm is folded, as in u2netp: every "REBNCONV" is a conv with bias and a ReLU (the published
graphs are inference exports). Checked against the authors' and SkyTNT's code at 1e-4 on the sample
photos (tests/parity/test_isnet_network.py). The torch routes run it from weights converted once from
the published graphs (craftai_prepare.converters.isnet); isnet-anime's graph keeps only the first
side output, so its network is built with `sides=1`.
"""

from __future__ import annotations

import torch
from torch import nn

from craftai_models.u2netp import RSU, _pool, _upsample_like

#: The side of the square input the published graphs were exported for.
INPUT_SIZE = 1024
#: (M, C_out) of each stage, En_1..En_6, then De_5..De_1 (the authors' `ISNetDIS`).
ENCODER = ((32, 64), (32, 128), (64, 256), (128, 512), (256, 512), (256, 512))
DECODER = ((256, 512), (128, 256), (64, 128), (32, 64), (16, 64))
STEM_CHANNELS = 64
# The prepared torch routes' weights, written by the conversion of each published graph.
WEIGHTS = "isnet-general-use.safetensors"
WEIGHTS_ANIME = "isnet-anime.safetensors"


class IsNet(nn.Module):
    """The image segmentation component: stem -> En_1..En_6 -> De_5..De_1 -> side maps.

    ``forward`` returns the first ``sides`` side maps (all six by default) at the input's size,
    sigmoid applied, side 1 (the answer) first. Eval only.
    """

    def __init__(self, sides: int = 6) -> None:
        super().__init__()
        if not 1 <= sides <= 6:
            raise ValueError(f"IS-Net has six side outputs; {sides} asked")
        self.sides = sides
        (m1, c1), (m2, c2), (m3, c3), (m4, c4), (m5, c5), (m6, c6) = ENCODER
        (n5, d5), (n4, d4), (n3, d3), (n2, d2), (n1, d1) = DECODER
        self.stem = nn.Conv2d(3, STEM_CHANNELS, 3, stride=2, padding=1)  # 1024² -> 512², no BN, no ReLU
        self.en_1 = RSU(7, STEM_CHANNELS, m1, c1)
        self.en_2 = RSU(6, c1, m2, c2)
        self.en_3 = RSU(5, c2, m3, c3)
        self.en_4 = RSU(4, c3, m4, c4)
        self.en_5 = RSU(4, c4, m5, c5, dilated=True)
        self.en_6 = RSU(4, c5, m6, c6, dilated=True)
        self.de_5 = RSU(4, c6 + c5, n5, d5, dilated=True)
        self.de_4 = RSU(4, d5 + c4, n4, d4)
        self.de_3 = RSU(5, d4 + c3, n3, d3)
        self.de_2 = RSU(6, d3 + c2, n2, d2)
        self.de_1 = RSU(7, d2 + c1, n1, d1)
        for k, channels in enumerate((d1, d2, d3, d4, d5, c6)[:sides], start=1):
            self.add_module(f"side_{k}", nn.Conv2d(channels, 1, 3, padding=1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``x``: f32[N, 3, H, W] (normalised picture) -> ``sides`` f32[N, 1, H, W] maps in [0, 1]
        (shapes below at 1024²)."""
        hx1 = self.en_1(self.stem(x))  # [N, 64, 512, 512]
        hx2 = self.en_2(_pool(hx1))  # [N, 128, 256, 256]
        hx3 = self.en_3(_pool(hx2))  # [N, 256, 128, 128]
        hx4 = self.en_4(_pool(hx3))  # [N, 512, 64, 64]
        hx5 = self.en_5(_pool(hx4))  # [N, 512, 32, 32]
        hx6 = self.en_6(_pool(hx5))  # [N, 512, 16, 16]

        hx5d = self.de_5(torch.cat((_upsample_like(hx6, hx5), hx5), dim=1))  # [N, 512, 32, 32]
        hx4d = self.de_4(torch.cat((_upsample_like(hx5d, hx4), hx4), dim=1))  # [N, 256, 64, 64]
        hx3d = self.de_3(torch.cat((_upsample_like(hx4d, hx3), hx3), dim=1))  # [N, 128, 128, 128]
        hx2d = self.de_2(torch.cat((_upsample_like(hx3d, hx2), hx2), dim=1))  # [N, 64, 256, 256]
        hx1d = self.de_1(torch.cat((_upsample_like(hx2d, hx1), hx1), dim=1))  # [N, 64, 512, 512]

        decoded = (hx1d, hx2d, hx3d, hx4d, hx5d, hx6)[: self.sides]
        sides = (self.get_submodule(f"side_{k}")(d) for k, d in enumerate(decoded, start=1))
        return tuple(torch.sigmoid(_upsample_like(s, x)) for s in sides)  # each [N, 1, 1024, 1024]
