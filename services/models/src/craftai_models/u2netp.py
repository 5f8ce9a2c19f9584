"""U²-Net portable ("u2netp"): Qin et al., "U²-Net: Going deeper with nested U-structure for salient
object detection", Pattern Recognition 106, 2020.

Written here from the paper's description (section 3, figure 5 and table 1, the "U²-Net†" row), for
inference only. The weights come from the published ONNX graph (craftai_prepare.converters.u2netp).

BatchNorm is folded: the paper's "REBNCONV" (conv 3x3, BN, ReLU) is a conv 3x3 *with bias* and a
ReLU here, because that is what the published graph holds (119 Conv nodes with biases and no
BatchNormalization node): the exporter folded every BN into its conv. A module with a separate BN
could not be filled from that graph without inventing statistics, and conv-with-bias performs the
graph's own arithmetic, so the torch network reproduces it up to the order of floating-point sums.

Shapes in comments are for the published input size, N x 3 x 320 x 320; the network itself takes any
size (pooling uses ceil mode and the decoder upsamples to the skip tensor's size, as the graph does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

#: The side of the square input the published graph was exported for.
INPUT_SIZE = 320
# The prepared torch routes' weights, written by the conversion of the published graph: u2netp's,
# and the full network's (u2net, u2net_human_seg).
WEIGHTS = "u2netp.safetensors"
WEIGHTS_FULL = "u2net.safetensors"
#: Names of the seven outputs, in the published graph's order: the fused map first, then the six
#: side outputs (side 1 at full resolution ... side 6 from the deepest stage), all after a sigmoid.
OUTPUT_NAMES = ("fused", "side_1", "side_2", "side_3", "side_4", "side_5", "side_6")


def _pool(x: torch.Tensor) -> torch.Tensor:
    """Max-pool 2x2, stride 2, ceil mode (an odd side keeps its last row/column, as in the graph)."""
    return F.max_pool2d(x, kernel_size=2, stride=2, ceil_mode=True)


def _upsample_like(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Bilinear resize of ``x`` to the spatial size of ``like`` (half-pixel centres, no antialias).

    The graph's Resize nodes take their size from the skip tensor's shape, so the decoder follows
    the encoder exactly even when a side was odd.
    """
    return F.interpolate(x, size=like.shape[-2:], mode="bilinear", align_corners=False)


class ConvReLU(nn.Module):
    """The paper's REBNCONV with its BatchNorm folded into the conv: conv 3x3 (bias) + ReLU.

    Padding equals the dilation, so the spatial size never changes.
    """

    def __init__(self, in_channels: int, out_channels: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class RSU(nn.Module):
    """Residual U-block RSU-L (paper section 3.1, figure 2e); with ``dilated`` the RSU-4F variant.

    Three parts: an input conv turning C_in into C_out channels (F1(x)); a U-Net of height L on
    F1(x) with M middle channels; and the residual sum F1(x) + U(F1(x)).

    The U-Net has levels 1..L. Levels 1..L-1 are the encoder: one ConvReLU each, a max-pool between
    two levels (RSU-L), or no pooling and dilations 1, 2, 4 ... (RSU-4F, for the low-resolution
    stages, where pooling would leave too little). Level L (``bottom``) is a ConvReLU with dilation 2
    (RSU-L) or 2^(L-1) (RSU-4F) on level L-1's output, without pooling. The decoder goes back up:
    at level k it concatenates the deeper result and the encoder's level-k output (deeper first),
    applies its ConvReLU (2M -> M channels, or 2M -> C_out at level 1) and, in RSU-L, upsamples to
    level k-1's size.

    ``encoder[k-1]`` and ``decoder[k-1]`` are level k's two convs (the skip pair), so the decoder
    list runs in the opposite order to the one it is applied in.
    """

    def __init__(
        self, height: int, in_channels: int, mid_channels: int, out_channels: int, *, dilated: bool = False
    ) -> None:
        super().__init__()
        if height < 2:
            raise ValueError("an RSU needs a height of at least 2")
        self.height = height
        self.dilated = dilated

        def dilation(level: int) -> int:
            """Dilation of the encoder/decoder conv at ``level`` (1-based); 1 unless RSU-4F."""
            return 2 ** (level - 1) if dilated else 1

        self.conv_in = ConvReLU(in_channels, out_channels)
        self.encoder = nn.ModuleList(
            ConvReLU(out_channels if level == 1 else mid_channels, mid_channels, dilation(level))
            for level in range(1, height)
        )
        self.bottom = ConvReLU(mid_channels, mid_channels, dilation(height) if dilated else 2)
        self.decoder = nn.ModuleList(
            ConvReLU(2 * mid_channels, out_channels if level == 1 else mid_channels, dilation(level))
            for level in range(1, height)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # RSU-7 on 3 x 320 x 320 (En_1), C_out = 64, M = 16, for example:
        hx_in: torch.Tensor = self.conv_in(x)  # [N, 64, 320, 320]       F1(x)
        skips: list[torch.Tensor] = []
        hx: torch.Tensor = hx_in
        for level, conv in enumerate(self.encoder, start=1):
            if level > 1 and not self.dilated:
                hx = _pool(hx)  # 320 -> 160 -> 80 -> 40 -> 20 -> 10
            hx = conv(hx)  # [N, 16, 320 / 2^(level-1), ...]
            skips.append(hx)
        hx = self.bottom(hx)  # [N, 16, 10, 10], dilation 2, same size as level 6
        for level in range(self.height - 1, 0, -1):
            hx = self.decoder[level - 1](torch.cat((hx, skips[level - 1]), dim=1))  # 32 -> 16 (or 64)
            if level > 1 and not self.dilated:
                hx = _upsample_like(hx, skips[level - 2])
        return hx + hx_in  # [N, 64, 320, 320]       F1(x) + U(F1(x))


@dataclass(frozen=True)
class Widths:
    """Table 1's channels: (M, C_out) of each stage, En_1..En_6 then De_5..De_1; each decoder stage
    takes the deeper stage's output and its encoder twin's, concatenated."""

    encoder: tuple[tuple[int, int], ...]
    decoder: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if len(self.encoder) != 6 or len(self.decoder) != 5:
            raise ValueError("U²-Net has six encoder and five decoder stages")


#: U²-Net† (1.13 M parameters): every stage M = 16, C_out = 64.
PORTABLE = Widths(encoder=((16, 64),) * 6, decoder=((16, 64),) * 5)
#: U²-Net (44.0 M parameters).
FULL = Widths(
    encoder=((32, 64), (32, 128), (64, 256), (128, 512), (256, 512), (256, 512)),
    decoder=((256, 512), (128, 256), (64, 128), (32, 64), (16, 64)),
)


class U2Net(nn.Module):
    """U²-Net at the widths of table 1 (`FULL` by default; `PORTABLE` is U2NetP): six encoder stages
    En_1..En_6, five decoder stages De_5..De_1, six side outputs and their 1x1 fusion.

    Stages: RSU-7, RSU-6, RSU-5, RSU-4, RSU-4F, RSU-4F, and back up RSU-4F, RSU-4, RSU-5, RSU-6,
    RSU-7. Side output k is a conv 3x3 (C_out -> 1) on De_k (En_6 for k = 6), upsampled to the input
    size; the fused map is a conv 1x1 on the six concatenated side logits. ``forward`` returns the
    sigmoid of the fused map and of the six side outputs, in that order, like the published graphs.
    Eval only: no training code and no layer that behaves differently in training.
    """

    def __init__(self, widths: Widths = FULL) -> None:
        super().__init__()
        (m1, c1), (m2, c2), (m3, c3), (m4, c4), (m5, c5), (m6, c6) = widths.encoder
        (n5, d5), (n4, d4), (n3, d3), (n2, d2), (n1, d1) = widths.decoder
        self.en_1 = RSU(7, 3, m1, c1)
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
        # Side outputs (saliency logits) and their fusion.
        self.side_1 = nn.Conv2d(d1, 1, 3, padding=1)
        self.side_2 = nn.Conv2d(d2, 1, 3, padding=1)
        self.side_3 = nn.Conv2d(d3, 1, 3, padding=1)
        self.side_4 = nn.Conv2d(d4, 1, 3, padding=1)
        self.side_5 = nn.Conv2d(d5, 1, 3, padding=1)
        self.side_6 = nn.Conv2d(c6, 1, 3, padding=1)
        self.fuse = nn.Conv2d(6, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``x``: f32[N, 3, H, W] (normalised picture) -> seven f32[N, 1, H, W] maps in [0, 1] (the
        shapes below are U²-Net†'s at 320²)."""
        hx1 = self.en_1(x)  # [N, 64, 320, 320]
        hx2 = self.en_2(_pool(hx1))  # [N, 64, 160, 160]
        hx3 = self.en_3(_pool(hx2))  # [N, 64, 80, 80]
        hx4 = self.en_4(_pool(hx3))  # [N, 64, 40, 40]
        hx5 = self.en_5(_pool(hx4))  # [N, 64, 20, 20]
        hx6 = self.en_6(_pool(hx5))  # [N, 64, 10, 10]

        hx5d = self.de_5(torch.cat((_upsample_like(hx6, hx5), hx5), dim=1))  # [N, 64, 20, 20]
        hx4d = self.de_4(torch.cat((_upsample_like(hx5d, hx4), hx4), dim=1))  # [N, 64, 40, 40]
        hx3d = self.de_3(torch.cat((_upsample_like(hx4d, hx3), hx3), dim=1))  # [N, 64, 80, 80]
        hx2d = self.de_2(torch.cat((_upsample_like(hx3d, hx2), hx2), dim=1))  # [N, 64, 160, 160]
        hx1d = self.de_1(torch.cat((_upsample_like(hx2d, hx1), hx1), dim=1))  # [N, 64, 320, 320]

        s1 = self.side_1(hx1d)  # [N, 1, 320, 320] logits
        s2 = _upsample_like(self.side_2(hx2d), s1)
        s3 = _upsample_like(self.side_3(hx3d), s1)
        s4 = _upsample_like(self.side_4(hx4d), s1)
        s5 = _upsample_like(self.side_5(hx5d), s1)
        s6 = _upsample_like(self.side_6(hx6), s1)
        fused = self.fuse(torch.cat((s1, s2, s3, s4, s5, s6), dim=1))  # [N, 1, 320, 320]
        return tuple(torch.sigmoid(t) for t in (fused, s1, s2, s3, s4, s5, s6))


class U2NetP(U2Net):
    """U²-Net portable (the paper's "U²-Net†"): every stage M = 16 middle and 64 output channels."""

    def __init__(self) -> None:
        super().__init__(PORTABLE)
