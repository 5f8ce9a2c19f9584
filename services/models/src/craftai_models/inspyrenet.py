"""InSPyReNet (Kim et al., "Revisiting Image Pyramid Structure for High Resolution Salient Object
Detection", ACCV 2022) with a Swin-B backbone, for inference only.

Written in this project from the paper and the published checkpoint's key names
(tests/data/matte_inspyrenet_state_dict.tsv, 1,625 tensors): module attribute names follow those keys
exactly, so the pinned `inspyrenet.safetensors` loads by name, strict. The trained network's quirks
are kept on purpose, because the weights were learnt with them:

- the axial self-attention and SICA reshape NCHW tensors with raw `view`s (no permute): the "rows"
  they attend over are chunks of memory, not image rows;
- SICA resizes its features to a fixed stage size derived from `base_size` (1024² for the published
  weights), whatever the input size;
- the saliency pyramid: zero-insertion upsampling + 7×7 Gaussian (σ=1, reflect padding), plus a
  Laplacian residual resized with align_corners=True;
- the output is the sigmoid min-max normalised. DEVIATION: the reference normalises over the whole
  batch tensor; here each image is normalised on its own, so that batching requests does not change
  any answer (identical for a batch of one).

Shapes in comments are for a 1024×1024 input, batch B, depth D=64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from craftai_models.checkpoints import Pin, expected_tensors, read_state_dict
from craftai_models.swin import SwinTransformer, swin_b

__all__ = [
    "InSPyReNet",
    "Stages",
    "fold_batchnorm",
    "inspyrenet_swin_b",
    "load_inspyrenet",
    "normalise_per_image",
]


class ConvBn(nn.Module):
    """Conv (no bias, "same" padding) + optional BatchNorm + optional ReLU: keys `conv.*`, `bn.*`."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int | tuple[int, int],
        *,
        dilation: int = 1,
        bn: bool = True,
        relu: bool = False,
    ) -> None:
        super().__init__()
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        if kh % 2 == 0 or kw % 2 == 0:
            raise ValueError("only odd kernels keep the size with symmetric padding")
        padding = (dilation * (kh - 1) // 2, dilation * (kw - 1) // 2)
        self.conv = nn.Conv2d(cin, cout, (kh, kw), padding=padding, dilation=dilation, bias=False)
        self.bn = nn.BatchNorm2d(cout) if bn else None
        self.relu = relu

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return F.relu(x) if self.relu else x


class AxialSelfAttention(nn.Module):
    """Self-attention along one axis ('h' or 'w'), residual scaled by a learnt `gamma`.

    Quirk kept from the trained network: query/key/value (B, C', H, W) are *viewed* as
    (B, C'·HW/L, L) with L = H ('h') or W ('w'): the length-L sequences are consecutive memory
    chunks of the NCHW tensor, which for 'h' are not image columns.
    """

    def __init__(self, channels: int, axis: str) -> None:
        super().__init__()
        if axis not in ("h", "w"):
            raise ValueError(axis)
        self.axis = axis
        self.query_conv = ConvBn(channels, channels // 8, 1)
        self.key_conv = ConvBn(channels, channels // 8, 1)
        self.value_conv = ConvBn(channels, channels, 1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        length = h if self.axis == "h" else w
        q = self.query_conv(x).reshape(b, -1, length).transpose(1, 2)  # (B, L, C/8·HW/L)
        k = self.key_conv(x).reshape(b, -1, length)  # (B, C/8·HW/L, L)
        v = self.value_conv(x).reshape(b, -1, length)  # (B, C·HW/L, L)
        attention = torch.softmax(torch.bmm(q, k), dim=-1)  # (B, L, L)
        out = torch.bmm(v, attention.transpose(1, 2)).reshape(b, c, h, w)
        return self.gamma * out + x


class AxialKernel(nn.Module):
    """One branch of the context module (PAA_kernel): 1×1, 1×r, r×1, axial attentions, 3×3 dilated r."""

    def __init__(self, cin: int, cout: int, r: int) -> None:
        super().__init__()
        self.conv0 = ConvBn(cin, cout, 1)
        self.conv1 = ConvBn(cout, cout, (1, r))
        self.conv2 = ConvBn(cout, cout, (r, 1))
        self.conv3 = ConvBn(cout, cout, 3, dilation=r)
        self.Hattn = AxialSelfAttention(cout, "h")
        self.Wattn = AxialSelfAttention(cout, "w")

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv2(self.conv1(self.conv0(x)))
        out: Tensor = self.conv3(self.Hattn(x) + self.Wattn(x))
        return out


class ContextModule(nn.Module):
    """Pyramid axial attention encoder block (PAA_e): four branches, 3×3 fusion, 1×1 residual, ReLU."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.branch0 = ConvBn(cin, cout, 1)
        self.branch1 = AxialKernel(cin, cout, 3)
        self.branch2 = AxialKernel(cin, cout, 5)
        self.branch3 = AxialKernel(cin, cout, 7)
        self.conv_cat = ConvBn(4 * cout, cout, 3)
        self.conv_res = ConvBn(cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        """(B, Cin, h, w) -> (B, D, h, w)."""
        branches = torch.cat([self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)], dim=1)
        return F.relu(self.conv_cat(branches) + self.conv_res(x))


class Decoder(nn.Module):
    """Pyramid axial attention decoder (PAA_d): fuses /8, /16, /32 into a feature and a logit at /8."""

    def __init__(self, cin: int, depth: int) -> None:
        super().__init__()
        self.conv1 = ConvBn(cin, depth, 3)
        self.conv2 = ConvBn(depth, depth, 3)
        self.conv3 = ConvBn(depth, depth, 3)
        self.conv4 = ConvBn(depth, depth, 3)
        self.conv5 = ConvBn(depth, 1, 3, bn=False)
        self.Hattn = AxialSelfAttention(depth, "h")
        self.Wattn = AxialSelfAttention(depth, "w")

    def forward(self, x3: Tensor, x4: Tensor, x5: Tensor) -> tuple[Tensor, Tensor]:
        """x3 (B,D,128²), x4 (B,D,64²), x5 (B,D,32²) -> feature (B,D,128²), logit (B,1,128²)."""
        size = x3.shape[-2:]
        x4 = F.interpolate(x4, size=size, mode="bilinear", align_corners=True)
        x5 = F.interpolate(x5, size=size, mode="bilinear", align_corners=True)
        x = self.conv1(torch.cat([x5, x4, x3], dim=1))
        x = self.conv2(self.Hattn(x) + self.Wattn(x))
        x = self.conv4(self.conv3(x))
        return x, self.conv5(x)


class SICA(nn.Module):
    """Scale-invariant context attention: refines features with region contexts read from the
    coarser saliency map (fg / bg / uncertain) and, with `lmap_in`, the previous Laplacian (fg / bg).

    Quirk kept: features and class maps are resized to the fixed `stage_size` and *viewed* (not
    transposed) to (B, hw, C) and (B, n, hw) before the context product.
    """

    def __init__(self, cin: int, depth: int, stage_size: tuple[int, int], lmap_in: bool) -> None:
        super().__init__()
        self.depth = depth
        self.stage_size = stage_size
        self.lmap_in = lmap_in
        self.conv_query = nn.Sequential(ConvBn(cin, depth, 3, relu=True), ConvBn(depth, depth, 3, relu=True))
        self.conv_key = nn.Sequential(ConvBn(cin, depth, 1, relu=True), ConvBn(depth, depth, 1, relu=True))
        self.conv_value = nn.Sequential(ConvBn(cin, depth, 1, relu=True), ConvBn(depth, depth, 1, relu=True))
        self.conv_out1 = ConvBn(depth, depth, 3, relu=True)
        self.conv_out2 = ConvBn(cin + depth, depth, 3, relu=True)
        self.conv_out3 = ConvBn(depth, depth, 3, relu=True)
        self.conv_out4 = ConvBn(depth, 1, 1)
        self.threshold = nn.Parameter(torch.tensor([0.5]))
        self.lthreshold = nn.Parameter(torch.tensor([0.5])) if lmap_in else None

    def forward(self, x: Tensor, smap: Tensor, lmap: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (B, Cin, h, w), smap/lmap logits at any size -> feature (B, D, h, w), Laplacian (B, 1, h, w)."""
        if (lmap is None) == self.lmap_in:
            raise ValueError("lmap is required exactly when the module was built with lmap_in")
        b, _, h, w = x.shape
        p = torch.sigmoid(F.interpolate(smap, size=(h, w), mode="bilinear", align_corners=False)) - self.threshold
        classes = [p.clamp(0, 1), (-p).clamp(0, 1), self.threshold - p.abs()]  # fg, bg, uncertain
        if lmap is not None and self.lthreshold is not None:
            lp = torch.sigmoid(F.interpolate(lmap, size=(h, w), mode="bilinear", align_corners=False))
            lp = lp - self.lthreshold
            classes += [lp.clamp(0, 1), (-lp).clamp(0, 1)]
        prob = torch.cat(classes, dim=1)  # (B, n, h, w), n = 3 or 5
        n = prob.shape[1]
        sh, sw = self.stage_size
        # The context is a sum over all stage_size pixels (1024² at attention0): ~1e5-1e6 overflows
        # float16, so under autocast it and the two small convs that read it stay in float32
        # (the same operations as the reference in float32; a deviation only under autocast).
        with torch.autocast(x.device.type, enabled=False):
            feats = F.interpolate(x.float(), size=(sh, sw), mode="bilinear", align_corners=False)
            feats = feats.reshape(b, sh * sw, -1)  # raw view of (B, Cin, sh, sw)
            prob = F.interpolate(prob.float(), size=(sh, sw), mode="bilinear", align_corners=False)
            prob = prob.reshape(b, n, sh * sw)
            context = torch.bmm(prob, feats).transpose(1, 2).unsqueeze(3)  # (B, Cin, n, 1)
            key = self.conv_key(context).reshape(b, self.depth, -1)  # (B, D, n)
            value = self.conv_value(context).reshape(b, self.depth, -1).transpose(1, 2)  # (B, n, D)

        query = self.conv_query(x).reshape(b, self.depth, -1).transpose(1, 2)  # (B, hw, D)
        similarity = torch.softmax(torch.bmm(query, key) * self.depth**-0.5, dim=-1)  # (B, hw, n)
        refined = torch.bmm(similarity, value).transpose(1, 2).reshape(b, -1, h, w)  # (B, D, h, w)

        x = torch.cat([x, self.conv_out1(refined)], dim=1)
        x = self.conv_out3(self.conv_out2(x))
        return x, self.conv_out4(x)


def _gaussian_7x7() -> Tensor:
    """outer(g, g) with g the normalised 7-tap Gaussian of σ=1 (what OpenCV's getGaussianKernel(7, 1) gives)."""
    g = torch.exp(-((torch.arange(7, dtype=torch.float64) - 3) ** 2) / 2)
    g = g / g.sum()
    return torch.outer(g, g).float()


class ImagePyramid(nn.Module):
    """Laplacian-pyramid expansion of one-channel saliency maps (no weights; kernel is a constant)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kernel", _gaussian_7x7()[None, None], persistent=False)  # (1, 1, 7, 7)

    def expand(self, x: Tensor) -> Tensor:
        """(B, 1, h, w) -> (B, 1, 2h, 2w): zeros between samples, reflect pad 3, Gaussian × 4."""
        b, c, h, w = x.shape
        up = x.new_zeros(b, c, 2 * h, 2 * w)
        up[:, :, 0::2, 0::2] = x
        kernel = self.kernel
        assert isinstance(kernel, Tensor)
        return F.conv2d(F.pad(up, (3, 3, 3, 3), mode="reflect"), (4 * kernel).to(x.dtype))

    def reconstruct(self, x: Tensor, laplacian: Tensor) -> Tensor:
        """Next finer saliency level: expand(x) + the Laplacian (resized with align_corners=True if needed)."""
        up = self.expand(x)
        if laplacian.shape[-2:] != up.shape[-2:]:
            laplacian = F.interpolate(laplacian, size=up.shape[-2:], mode="bilinear", align_corners=True)
        return up + laplacian


def normalise_per_image(pred: Tensor) -> Tensor:
    """(p - min) / (max - min + 1e-8) over each image of the batch (the reference: over the whole batch)."""
    lo = pred.amin(dim=(1, 2, 3), keepdim=True)
    hi = pred.amax(dim=(1, 2, 3), keepdim=True)
    return (pred - lo) / (hi - lo + 1e-8)


@dataclass(frozen=True)
class Stages:
    """Every intermediate of one forward pass (for parity tests and diagnostics)."""

    backbone: list[Tensor]  # 5 maps: 128@/4, 128@/4, 256@/8, 512@/16, 1024@/32
    context: list[Tensor]  # context1..5 outputs, D channels each
    decoder: tuple[Tensor, Tensor]  # feature (B,D,/8), logit d3 (B,1,/8)
    attention: list[tuple[Tensor, Tensor]]  # attention2, attention1, attention0 outputs (feature, Laplacian)
    saliency: list[Tensor]  # d3@/8, d2@/4, d1@/2, d0@/1 (logits)
    pred: Tensor  # (B, 1, H, W) in [0, 1], min-max per image


class InSPyReNet(nn.Module):
    """Backbone -> five context modules -> decoder at /8 -> three SICA steps up the saliency pyramid."""

    def __init__(
        self, backbone: SwinTransformer, channels: Sequence[int], depth: int, base_size: tuple[int, int]
    ) -> None:
        super().__init__()
        self.base_size = base_size
        self.backbone = backbone
        self.context1 = ContextModule(channels[0], depth)
        self.context2 = ContextModule(channels[1], depth)
        self.context3 = ContextModule(channels[2], depth)
        self.context4 = ContextModule(channels[3], depth)
        self.context5 = ContextModule(channels[4], depth)
        self.decoder = Decoder(3 * depth, depth)
        bh, bw = base_size
        self.attention0 = SICA(depth, depth, (bh, bw), lmap_in=True)
        self.attention1 = SICA(2 * depth, depth, (bh // 2, bw // 2), lmap_in=True)
        self.attention2 = SICA(2 * depth, depth, (bh // 4, bw // 4), lmap_in=False)
        self.image_pyramid = ImagePyramid()

    def stages(self, x: Tensor) -> Stages:
        """x: (B, 3, H, W) ImageNet-normalised, H and W multiples of 32 (others run, untrained so)."""
        _, _, h, w = x.shape
        feats = self.backbone(x)
        x1 = self.context1(feats[0])  # (B, D, /4)
        x2 = self.context2(feats[1])  # (B, D, /4)
        x3 = self.context3(feats[2])  # (B, D, /8)
        x4 = self.context4(feats[3])  # (B, D, /16)
        x5 = self.context5(feats[4])  # (B, D, /32)
        f3, d3 = self.decoder(x3, x4, x5)  # (B, D, /8), (B, 1, /8)

        f3 = F.interpolate(f3, size=(h // 4, w // 4), mode="bilinear", align_corners=False)
        f2, p2 = self.attention2(torch.cat([x2, f3], dim=1), d3)  # (B, D, /4), (B, 1, /4)
        d2 = self.image_pyramid.reconstruct(d3, p2)  # (B, 1, /4)

        x1 = F.interpolate(x1, size=(h // 2, w // 2), mode="bilinear", align_corners=False)
        f2u = F.interpolate(f2, size=(h // 2, w // 2), mode="bilinear", align_corners=False)
        f1, p1 = self.attention1(torch.cat([x1, f2u], dim=1), d2, p2)  # (B, D, /2), (B, 1, /2)
        d1 = self.image_pyramid.reconstruct(d2, p1)  # (B, 1, /2)

        f1u = F.interpolate(f1, size=(h, w), mode="bilinear", align_corners=False)
        f0, p0 = self.attention0(f1u, d1, p1)  # (B, D, H, W), (B, 1, H, W)
        d0 = self.image_pyramid.reconstruct(d1, p0)  # (B, 1, H, W)

        pred = normalise_per_image(torch.sigmoid(d0))
        return Stages(
            backbone=list(feats),
            context=[x1, x2, x3, x4, x5],
            decoder=(f3, d3),
            attention=[(f2, p2), (f1, p1), (f0, p0)],
            saliency=[d3, d2, d1, d0],
            pred=pred,
        )

    def forward(self, x: Tensor) -> Tensor:
        """(B, 3, H, W) normalised -> matte (B, 1, H, W) in [0, 1]."""
        return self.stages(x).pred


def inspyrenet_swin_b(base_size: tuple[int, int] = (1024, 1024), depth: int = 64) -> InSPyReNet:
    """The published configuration: Swin-B, D=64, base_size 1024² (the "Plus Ultra" checkpoint)."""
    return InSPyReNet(swin_b(), (128, 128, 256, 512, 1024), depth, base_size)


@torch.no_grad()
def fold_batchnorm(model: nn.Module) -> nn.Module:
    """For inference: fold every ConvBn's BatchNorm (eval statistics) into its conv, which gains a
    bias: y = γ(Wx − μ)/√(σ² + ε) + β = (W·γ/√(σ² + ε))x + (β − μγ/√(σ² + ε)). One pass over the
    activations instead of two; the same function up to float rounding."""
    for module in model.modules():
        if isinstance(module, ConvBn) and module.bn is not None:
            bn, conv = module.bn, module.conv
            assert bn.running_mean is not None and bn.running_var is not None
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            bias = bn.bias - bn.running_mean * scale
            conv.weight.mul_(scale.view(-1, 1, 1, 1))
            conv.bias = nn.Parameter(bias.to(conv.weight.dtype), requires_grad=False)
            module.bn = None
    return model


def load_inspyrenet(
    path: Path,
    device: torch.device | str = "cpu",
    base_size: tuple[int, int] = (1024, 1024),
    *,
    pin: Pin | None = None,
) -> InSPyReNet:
    """Build the network without initialising weights, load the file strictly (every tensor by name,
    shape and dtype), eval mode. `pin`: check the bytes read against it first (for a file no one has
    verified; the infer service's loader has already hashed the store's file, once)."""
    with torch.device("meta"):
        model = inspyrenet_swin_b(base_size)
    state = read_state_dict(path, expected_tensors(model), pin=pin)
    model.load_state_dict(state, strict=True, assign=True)
    # Constants that are not in the file are rebuilt on the real device.
    model.image_pyramid.kernel = _gaussian_7x7()[None, None]
    return model.to(device).eval()
