"""BiRefNet (Zheng et al., "Bilateral Reference for High-Resolution Dichotomous Image
Segmentation", CAAI AIR 2024), for inference only: BiRefNet_lite with a Swin-T backbone, and the
Swin-L models (general, portrait, DIS, HRSOD, COD, massive, HR, dynamic) with the same parts at
twice the widths (`Architecture`).

Written in this project from the paper and the original code's layout (ZhengPeng7/BiRefNet
`models/birefnet.py` and `models/modules/*`, configuration of the lite model): module attribute
names follow the original state dict, so the pinned `model.safetensors` of ZhengPeng7/BiRefNet_lite
loads by name, strictly, as downloaded. The parts, in the paper's words and the code's names:

- `bb`: the Swin-T encoder, run on the picture and on a half-size copy ("multi-scale input": the
  half-size features are resized up and concatenated: 192, 384, 768, 1536 channels);
- `squeeze_module`: the context of all four levels resized to the deepest one (2880 channels),
  squeezed by one decoder block to 1536;
- `decoder`: the reconstruction, deep to shallow: `decoder_block4..1` (conv, BatchNorm, ReLU,
  ASPP over deformable convolutions, conv, BatchNorm), lateral 1×1 convs from the encoder,
  `ipt_blk5..1` injecting the picture itself, split into patches, at every level ("inward
  reference"), the gradient-attention gates `gdt_convs_*` that multiply levels 4..2 by a sigmoid
  map ("outward reference"; their gradient heads `gdt_convs_pred_*` and the side outputs
  `conv_ms_spvn_*` are training-only: in the file, never run), `conv_out1` the final logit.

Resampling is bilinear with align_corners=True everywhere, as trained. The input must be a
multiple of 32 on both sides (the patch injection splits the picture into a whole grid of 32×32,
16×16, 8×8 and 4×4 patches); the published weights were trained at 1024².

Patch order: the picture is split into patches, the patches stacked as channels. The code the lite
weights were trained with (before ZhengPeng7/BiRefNet 5198d3f, 2024-11-05) stacks them patch by
patch, columns of the grid outer, rows inner, the three colours innermost (`get_patches_batch`);
the code since stacks colour-major, then grid row, then grid column (einops
`b c (hg h) (wg w) -> b (c hg wg) h w`). The two give different channels. `PatchOrder` names both;
which one a checkpoint was trained with is a setting of the recipe's weights (`patch_order`),
proven against the published ONNX when the torch route is prepared (craftai_prepare's birefnet
converter), and recorded in the prepared folder beside the weights (`PREPARED_SETTINGS`);
docs/MATTE.md has the evidence.

Shapes in comments are for BiRefNet_lite at a 1024² input, batch B.

Swin-L (`birefnet_swin_l`): the backbone C=192 (window 12), every level's channels twice the lite's
(384, 768, 1536, 3072 after the multi-scale cat), the injection blocks and decoder scaled with them
as the original code scales them from its lateral channels. Evidence that this is the published
network (docs/MATTE.md, "Swin-L"): its tensors, stored as the published files store them (floats in
fp16, the relative position indices and BatchNorm counters in int64, `{"format": "pt"}` metadata),
make a safetensors file of exactly 444,473,596 bytes, the size of BiRefNet_dynamic's and
BiRefNet_HR's `model.safetensors`; and they are, renamed, exactly nobg's Swin-L BiRefNet's
(tests/unit/test_birefnet_swin_l.py). The loader checks every name, shape and dtype on the real
file before it is used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from craftai_models.checkpoints import Pin, expected_tensors, read_state_dict
from craftai_models.deform_conv import deform_conv2d
from craftai_models.swin import SwinTransformer, swin_l, swin_t

__all__ = [
    "FLOATS",
    "FLOAT_NAMES",
    "PREPARED_SETTINGS",
    "PREPARED_WEIGHTS",
    "TRAINED_ORDER",
    "TRAINED_SIDE",
    "Architecture",
    "BiRefNet",
    "PatchOrder",
    "Prepared",
    "Stages",
    "birefnet_lite",
    "birefnet_swin_l",
    "floats_named",
    "fold_batchnorm",
    "image_to_patches",
    "load_birefnet",
    "read_patch_order",
    "read_prepared",
    "write_prepared",
]


class PatchOrder(Enum):
    """How the picture's patches are stacked as channels (see the module docstring)."""

    PATCH_MAJOR = "patch-major"  # get_patches_batch: channel = (col·rows + row)·3 + colour
    CHANNEL_MAJOR = "channel-major"  # einops: channel = (colour·rows + row)·cols + col


TRAINED_ORDER = PatchOrder.PATCH_MAJOR  # the order of the lite checkpoint the recipe pins (docs/MATTE.md)
# The torch route's prepared folder: the checkpoint as published (a link or a copy) and its order.
PREPARED_WEIGHTS = "model.safetensors"
PREPARED_SETTINGS = "birefnet.json"
# (B, C, gh, h, gw, w) -> the stacking order of each, then (h, w)
_PATCH_AXES = {
    PatchOrder.CHANNEL_MAJOR: (0, 1, 2, 4, 3, 5),  # (B, C, gh, gw, h, w)
    PatchOrder.PATCH_MAJOR: (0, 4, 2, 1, 3, 5),  # (B, gw, gh, C, h, w)
}


def image_to_patches(image: Tensor, size: tuple[int, int], order: PatchOrder) -> Tensor:
    """(B, C, H, W) -> (B, C·gh·gw, h, w): the picture cut into a gh×gw grid of h×w patches
    (h, w = `size`; H, W must be multiples of them), the patches stacked as channels in `order`."""
    b, c, height, width = image.shape
    h, w = size
    if height % h or width % w:
        raise ValueError(f"a {height}x{width} picture does not split into {h}x{w} patches")
    gh, gw = height // h, width // w
    grid = image.reshape(b, c, gh, h, gw, w)
    return grid.permute(*_PATCH_AXES[order]).reshape(b, c * gh * gw, h, w)


def _resize(x: Tensor, size: Sequence[int]) -> Tensor:
    """Bilinear, align_corners=True (the trained network's only resampling); a no-op at the same size."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=True)


class DeformableConv2d(nn.Module):
    """DCNv2 block: an offset conv, a modulator conv (2·sigmoid) and the regular conv's weights
    applied at the shifted taps (craftai_models.deform_conv). Stride 1, "same" padding."""

    def __init__(self, cin: int, cout: int, kernel: int, bias: bool = False) -> None:
        super().__init__()
        self.padding = (kernel // 2, kernel // 2)
        self.offset_conv = nn.Conv2d(cin, 2 * kernel * kernel, kernel, padding=kernel // 2)
        self.modulator_conv = nn.Conv2d(cin, kernel * kernel, kernel, padding=kernel // 2)
        self.regular_conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        offset = self.offset_conv(x)  # (B, 2k², h, w): Δy, Δx per tap
        modulator = 2.0 * torch.sigmoid(self.modulator_conv(x))  # (B, k², h, w) in (0, 2)
        conv = self.regular_conv
        return deform_conv2d(x, offset, modulator, conv.weight, bias=conv.bias, padding=self.padding)


class ASPPModuleDeformable(nn.Module):
    """One ASPP branch (`_ASPPModuleDeformable`): deformable conv -> BatchNorm -> ReLU."""

    def __init__(self, cin: int, planes: int, kernel: int) -> None:
        super().__init__()
        self.atrous_conv = DeformableConv2d(cin, planes, kernel)
        self.bn: nn.Module = nn.BatchNorm2d(planes)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.atrous_conv(x)))


class GlobalPool(nn.Sequential):
    """The image-level ASPP branch: average over the picture, 1×1 conv, BatchNorm, ReLU (keys
    `global_avg_pool.1.*`, `.2.*`). Its (B, 256, 1, 1) output is the same at every pixel: the
    original resizes it to the feature size (bilinear from 1×1 repeats the value); here it stays
    1×1 and is broadcast where it is used."""

    def __init__(self, cin: int, planes: int) -> None:
        super().__init__(nn.AdaptiveAvgPool2d((1, 1)), nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = F.relu(self[2](self[1](self[0](x))))
        return out


class ASPPDeformable(nn.Module):
    """ASPP with deformable branches of kernel 1 (`aspp1`), 1, 3 and 7 (`aspp_deforms`), and the
    image-level branch; 1280 channels fused by a 1×1 conv, BatchNorm, ReLU (dropout: training only)."""

    def __init__(self, cin: int, cout: int | None = None, planes: int = 256) -> None:
        super().__init__()
        cout = cin if cout is None else cout
        self.aspp1 = ASPPModuleDeformable(cin, planes, 1)
        self.aspp_deforms = nn.ModuleList(ASPPModuleDeformable(cin, planes, k) for k in (1, 3, 7))
        self.global_avg_pool = GlobalPool(cin, planes)
        self.conv1 = nn.Conv2d(planes * 5, cout, 1, bias=False)
        self.bn1: nn.Module = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        # conv1 over the 1280-channel concatenation [aspp1, aspp_deforms, image level], computed as
        # the sum of its five 256-channel slices: no 1280-channel map is ever held (over 300 MB at
        # /4 of a 1024² input), and the image-level slice runs on its 1×1 map, then broadcasts.
        slices = torch.split(self.conv1.weight, self.conv1.weight.shape[1] // 5, dim=1)
        out = F.conv2d(self.aspp1(x), slices[0], self.conv1.bias)
        for branch, weight in zip(self.aspp_deforms, slices[1:4], strict=True):
            out = out + F.conv2d(branch(x), weight)
        out = out + F.conv2d(self.global_avg_pool(x), slices[4])  # (B, cout, 1, 1), broadcast
        return F.relu(self.bn1(out))


class BasicDecBlk(nn.Module):
    """The decoder block: 3×3 conv -> 64, BatchNorm, ReLU, ASPPDeformable, 3×3 conv, BatchNorm."""

    def __init__(self, cin: int, cout: int, inter: int = 64) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(cin, inter, 3, padding=1)
        self.bn_in: nn.Module = nn.BatchNorm2d(inter)
        self.dec_att = ASPPDeformable(inter)
        self.conv_out = nn.Conv2d(inter, cout, 3, padding=1)
        self.bn_out: nn.Module = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn_in(self.conv_in(x)))
        out: Tensor = self.bn_out(self.conv_out(self.dec_att(x)))
        return out


class BasicLatBlk(nn.Module):
    """Lateral connection from the encoder: one 1×1 conv."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.conv(x)
        return out


class SimpleConvs(nn.Module):
    """Input-patch injection block: two 3×3 convs (no normalisation, no activation)."""

    def __init__(self, cin: int, cout: int, inter: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, inter, 3, padding=1)
        self.conv_out = nn.Conv2d(inter, cout, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.conv_out(self.conv1(x))
        return out


class GradientGate(nn.Sequential):
    """`gdt_convs_*`: 3×3 conv -> 16, BatchNorm, ReLU; its features feed the attention head."""

    def __init__(self, cin: int, n: int = 16) -> None:
        super().__init__(nn.Conv2d(cin, n, 3, padding=1), nn.BatchNorm2d(n), nn.ReLU())


def _head(cin: int) -> nn.Sequential:
    """A 1×1 conv to one channel, in a Sequential as the original (keys `*.0.weight`)."""
    return nn.Sequential(nn.Conv2d(cin, 1, 1))


@dataclass(frozen=True)
class DecoderLevels:
    """What the decoder computed at each level (for parity tests and diagnostics)."""

    blocks: list[Tensor]  # decoder_block4..1 outputs, before the gates: 768@/32, 384@/16, 192@/8, 96@/4
    gates: list[Tensor]  # gradient-attention logits (before the sigmoid) at levels 4, 3, 2
    side: list[Tensor]  # training-only side logits conv_ms_spvn_4..2 on the gated levels (diagnostics)
    logits: Tensor  # (B, 1, H, W)


class Decoder(nn.Module):
    """Deep to shallow: at each level, the picture's patches injected, a decoder block, a gradient
    gate, then up to the next level plus its lateral; the last level up to full size, the full-size
    picture injected, the final 1×1 conv."""

    def __init__(self, channels: Sequence[int], order: PatchOrder) -> None:
        super().__init__()
        c4, c3, c2, c1 = channels  # 1536, 768, 384, 192 (deep to shallow)
        self.order = order
        self.ipt_blk5 = SimpleConvs(3 * 32 * 32, c4 // 8)  # 3072 -> 192
        self.ipt_blk4 = SimpleConvs(3 * 16 * 16, c4 // 8)  # 768 -> 192
        self.ipt_blk3 = SimpleConvs(3 * 8 * 8, c3 // 8)  # 192 -> 96
        self.ipt_blk2 = SimpleConvs(3 * 4 * 4, c2 // 8)  # 48 -> 48
        self.ipt_blk1 = SimpleConvs(3, c1 // 8)  # 3 -> 24
        self.decoder_block4 = BasicDecBlk(c4 + c4 // 8, c3)  # 1728 -> 768
        self.decoder_block3 = BasicDecBlk(c3 + c4 // 8, c2)  # 960 -> 384
        self.decoder_block2 = BasicDecBlk(c2 + c3 // 8, c1)  # 480 -> 192
        self.decoder_block1 = BasicDecBlk(c1 + c2 // 8, c1 // 2)  # 240 -> 96
        self.conv_out1 = nn.Sequential(nn.Conv2d(c1 // 2 + c1 // 8, 1, 1))  # 120 -> 1
        self.lateral_block4 = BasicLatBlk(c3, c3)
        self.lateral_block3 = BasicLatBlk(c2, c2)
        self.lateral_block2 = BasicLatBlk(c1, c1)
        for level, cin in zip((4, 3, 2), (c3, c2, c1), strict=True):
            self.add_module(f"conv_ms_spvn_{level}", nn.Conv2d(cin, 1, 1))
            self.add_module(f"gdt_convs_{level}", GradientGate(cin))
            self.add_module(f"gdt_convs_pred_{level}", _head(16))
            self.add_module(f"gdt_convs_attn_{level}", _head(16))

    def _inject(self, image: Tensor, p: Tensor, block: nn.Module, patch: Sequence[int]) -> Tensor:
        """p with the picture's patches (split into `patch`-sized pieces, resized to p) appended."""
        patches = _resize(image_to_patches(image, (patch[0], patch[1]), self.order), p.shape[2:])
        out: Tensor = torch.cat((p, block(patches)), dim=1)
        return out

    def _gate(self, p: Tensor, level: int, gates: list[Tensor], side: list[Tensor] | None) -> Tensor:
        logit: Tensor = getattr(self, f"gdt_convs_attn_{level}")(getattr(self, f"gdt_convs_{level}")(p))
        gates.append(logit)
        gated = p * torch.sigmoid(logit)
        if side is not None:
            side.append(getattr(self, f"conv_ms_spvn_{level}")(gated))
        return gated

    def levels(self, image: Tensor, features: Sequence[Tensor], *, side: bool = False) -> DecoderLevels:
        """image (B, 3, H, W) normalised; features x1..x4 the encoder levels /4../32 (x4 squeezed).

        Level by level, deep to shallow (the original code writes the four out one after the other):
        level 4 at /32 (1728 -> 768 channels), 3 at /16 (960 -> 384), 2 at /8 (480 -> 192) with their
        gates, then level 1 at /4 (240 -> 96) without one."""
        x1, x2, x3, x4 = features
        blocks: list[Tensor] = []
        gates: list[Tensor] = []
        sides: list[Tensor] | None = [] if side else None
        p = x4
        for level, skip in ((4, x3), (3, x2), (2, x1)):
            p = self._inject(image, p, getattr(self, f"ipt_blk{level + 1}"), tuple(p.shape[2:]))
            p = getattr(self, f"decoder_block{level}")(p)
            blocks.append(p)
            p = self._gate(p, level, gates, sides)
            p = _resize(p, skip.shape[2:]) + getattr(self, f"lateral_block{level}")(skip)  # up to the next level
        p = self._inject(image, p, self.ipt_blk2, tuple(p.shape[2:]))  # (B, 240, /4)
        p = self.decoder_block1(p)  # (B, 96, /4)
        blocks.append(p)
        p = _resize(p, image.shape[2:])  # (B, 96, H, W)
        p = self._inject(image, p, self.ipt_blk1, tuple(image.shape[2:]))  # (B, 120, H, W)
        logits: Tensor = self.conv_out1(p)
        return DecoderLevels(blocks, gates, sides or [], logits)


@dataclass(frozen=True)
class Stages:
    """Every intermediate of one forward pass (for parity tests and diagnostics)."""

    backbone: list[Tensor]  # Swin-T on the picture: 96@/4, 192@/8, 384@/16, 768@/32
    backbone_half: list[Tensor]  # Swin-T on the half-size copy, at /8../64
    features: list[Tensor]  # both concatenated: 192@/4, 384@/8, 768@/16, 1536@/32
    squeeze: Tensor  # (B, 1536, /32)
    decoder: DecoderLevels


class BiRefNet(nn.Module):
    """Encoder on two scales -> context squeezed at /32 -> decoder with the picture injected."""

    def __init__(self, backbone: SwinTransformer, channels: Sequence[int], order: PatchOrder = TRAINED_ORDER) -> None:
        super().__init__()
        c1, c2, c3, c4 = channels  # 192, 384, 768, 1536 (shallow to deep, after the multi-scale cat)
        self.bb = backbone
        self.squeeze_module = nn.Sequential(BasicDecBlk(c4 + c1 + c2 + c3, c4))  # 2880 -> 1536
        self.decoder = Decoder((c4, c3, c2, c1), order)

    def _encode(self, x: Tensor) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        full = list(self.bb(x))
        half = list(self.bb(_resize(x, (x.shape[2] // 2, x.shape[3] // 2))))
        features = [torch.cat((f, _resize(g, f.shape[2:])), dim=1) for f, g in zip(full, half, strict=True)]
        return full, half, features

    def stages(self, x: Tensor, side: bool = True) -> Stages:
        """x: (B, 3, H, W) ImageNet-normalised, H and W multiples of 32."""
        if x.shape[2] % 32 or x.shape[3] % 32:
            raise ValueError(f"BiRefNet takes sides that are multiples of 32, got {x.shape[2]}x{x.shape[3]}")
        full, half, (x1, x2, x3, x4) = self._encode(x)
        context = torch.cat([_resize(f, x4.shape[2:]) for f in (x1, x2, x3)] + [x4], dim=1)  # (B, 2880, /32)
        squeezed: Tensor = self.squeeze_module(context)
        levels = self.decoder.levels(x, (x1, x2, x3, squeezed), side=side)
        return Stages(full, half, [x1, x2, x3, x4], squeezed, levels)

    def forward(self, x: Tensor) -> Tensor:
        """(B, 3, H, W) normalised -> logits (B, 1, H, W) (the matte is their sigmoid)."""
        return self.stages(x, side=False).decoder.logits


def birefnet_lite(order: PatchOrder = TRAINED_ORDER) -> BiRefNet:
    """The published lite configuration: Swin-T, multi-scale input by concatenation."""
    return BiRefNet(swin_t(), (192, 384, 768, 1536), order)


def birefnet_swin_l(order: PatchOrder = TRAINED_ORDER) -> BiRefNet:
    """The published Swin-L configuration (`swin_v1_l`), multi-scale input by concatenation."""
    return BiRefNet(swin_l(), (384, 768, 1536, 3072), order)


class Architecture(Enum):
    """Which published configuration a checkpoint is, and how its floats are stored."""

    LITE = "lite"  # BiRefNet_lite: Swin-T, fp32
    SWIN_L = "swin-l"  # the Swin-L models: fp16

    def build(self, order: PatchOrder) -> BiRefNet:
        return birefnet_lite(order) if self is Architecture.LITE else birefnet_swin_l(order)

    @property
    def stored(self) -> torch.dtype:
        """The dtype of the published file's floating-point tensors."""
        return torch.float32 if self is Architecture.LITE else torch.float16

    def stored_as(self, floats: torch.dtype | None) -> torch.dtype:
        """How a file of this configuration stores its floats: `floats` where a recipe or record says
        (a file stored otherwise than published), else as the configuration is published."""
        return self.stored if floats is None else floats


@torch.no_grad()
def _fold(conv: nn.Conv2d, bn: nn.Module) -> None:
    """conv then BatchNorm (eval statistics) -> one conv: W·γ/√(σ²+ε), bias (b − μ)·γ/√(σ²+ε) + β."""
    assert isinstance(bn, nn.BatchNorm2d) and bn.running_mean is not None and bn.running_var is not None
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    bias = (conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)) - bn.running_mean
    conv.weight.mul_(scale.view(-1, 1, 1, 1))
    conv.bias = nn.Parameter((bias * scale + bn.bias).to(conv.weight.dtype), requires_grad=False)


def _conv_bn_pairs(model: BiRefNet) -> list[tuple[nn.Module, str, nn.Module]]:
    """(owner, BatchNorm attribute or index, the conv before it) for every BatchNorm of the network."""
    pairs: list[tuple[nn.Module, str, nn.Module]] = []
    for module in model.modules():
        if isinstance(module, BasicDecBlk):
            pairs += [(module, "bn_in", module.conv_in), (module, "bn_out", module.conv_out)]
        elif isinstance(module, ASPPDeformable):
            pairs.append((module, "bn1", module.conv1))
        elif isinstance(module, ASPPModuleDeformable):
            pairs.append((module, "bn", module.atrous_conv.regular_conv))
        elif isinstance(module, GlobalPool):
            pairs.append((module, "2", module[1]))
        elif isinstance(module, GradientGate):
            pairs.append((module, "1", module[0]))
    return pairs


@torch.no_grad()
def fold_batchnorm(model: BiRefNet) -> BiRefNet:
    """For inference on a GPU: every BatchNorm folded into the (deformable) conv before it, which
    gains a bias; the same function up to float rounding (a deformable conv is linear in its
    weights, so its BatchNorm folds into `regular_conv` like a plain conv's)."""
    for owner, name, conv in _conv_bn_pairs(model):
        bn = owner.get_submodule(name)
        if isinstance(bn, nn.BatchNorm2d) and isinstance(conv, nn.Conv2d):
            _fold(conv, bn)
            owner.register_module(name, nn.Identity())
    return model


def load_birefnet(
    path: Path,
    device: torch.device | str = "cpu",
    order: PatchOrder = TRAINED_ORDER,
    *,
    pin: Pin | None = None,
    architecture: Architecture = Architecture.LITE,
    floats: torch.dtype | None = None,
) -> BiRefNet:
    """Build the network without initialising weights, load the file strictly (every tensor by name,
    shape and dtype as `architecture` publishes it, its floats stored as `floats` where a file is
    stored otherwise), eval mode, floats in fp32. `pin`: check the bytes read against it first."""
    with torch.device("meta"):
        model = architecture.build(order)
    state = read_state_dict(path, expected_tensors(model, floats=architecture.stored_as(floats)), pin=pin)
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(device).eval()


#: The square input side the published weights were trained at, unless the recipe says otherwise.
TRAINED_SIDE = 1024


@dataclass(frozen=True)
class Prepared:
    """What a prepared folder records beside the checkpoint: how to read and run it."""

    order: PatchOrder
    architecture: Architecture = Architecture.LITE
    side: int = TRAINED_SIDE  # the network's square input side, as trained
    floats: torch.dtype | None = None  # how the checkpoint stores its floats, where not as `architecture` publishes

    @property
    def stored(self) -> torch.dtype:
        return self.architecture.stored_as(self.floats)


#: The dtypes a published checkpoint stores its floats in, by the names the recipes and records use.
FLOATS = {"float16": torch.float16, "float32": torch.float32}
FLOAT_NAMES = {dtype: name for name, dtype in FLOATS.items()}


def floats_named(value: str) -> torch.dtype:
    """The dtype a recipe or a record names; ValueError in plain words for another name."""
    if value not in FLOATS:
        raise ValueError(f"{value!r} is none of the float storages {', '.join(FLOATS)}")
    return FLOATS[value]


def write_prepared(
    path: Path,
    order: PatchOrder,
    architecture: Architecture = Architecture.LITE,
    side: int = TRAINED_SIDE,
    floats: torch.dtype | None = None,
) -> None:
    """The prepared folder's record of the checkpoint's patch order, configuration, input side and
    float storage (read back by `read_prepared`)."""
    name = FLOAT_NAMES[architecture.stored_as(floats)]
    record = {"patch_order": order.value, "architecture": architecture.value, "input_side": side, "floats": name}
    path.write_text(json.dumps(record) + "\n")


def read_prepared(path: Path) -> Prepared:
    """What a prepared folder records; ValueError in plain words when it names no patch order, an
    unknown configuration or a side that is not a positive multiple of 32. A record written before
    the configuration and side were recorded is BiRefNet_lite's at 1024²; one written before the
    float storage was, the configuration's."""
    try:
        record = json.loads(path.read_text())
        order = PatchOrder(record["patch_order"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path.name} records no patch order this network knows ({exc})") from exc
    try:
        architecture = Architecture(record.get("architecture", Architecture.LITE.value))
    except ValueError as exc:
        raise ValueError(f"{path.name} records a configuration this network does not know ({exc})") from exc
    side = record.get("input_side", TRAINED_SIDE)
    if not isinstance(side, int) or side <= 0 or side % 32:
        raise ValueError(f"{path.name} records the input side {side!r}, not a positive multiple of 32")
    try:
        floats = floats_named(record.get("floats", FLOAT_NAMES[architecture.stored]))
    except ValueError as exc:
        raise ValueError(f"{path.name} records floats this network does not read ({exc})") from exc
    return Prepared(order, architecture, side, floats)


def read_patch_order(path: Path) -> PatchOrder:
    """The patch order a prepared folder records; ValueError in plain words when it names none."""
    return read_prepared(path).order
