"""BiRefNet_lite's parts that can be checked alone, quickly: the deformable convolution against the
DCNv2 formula, the two patch orders against the original code's splits, the key layout against
the pinned file, BatchNorm folding, the input rule. The network against nobg's:
tests/parity/test_birefnet_parity.py."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save
from torch import Tensor

from craftai_dev.birefnet_fixture import METADATA, random_network
from craftai_dev.birefnet_reference import get_patches_batch
from craftai_dev.deform_conv_reference import deform_conv2d as deform_conv2d_formula
from craftai_models.birefnet import (
    TRAINED_ORDER,
    PatchOrder,
    birefnet_lite,
    fold_batchnorm,
    image_to_patches,
)
from craftai_models.checkpoints import expected_tensors
from craftai_models.deform_conv import deform_conv2d

PINNED_SIZE = 177_634_392  # model.safetensors of ZhengPeng7/BiRefNet_lite (recipes.toml)


@pytest.mark.parametrize(
    ("shape", "kernel", "offset_scale"),
    [
        ((2, 4, 9, 7), 3, 3.0),  # non-square, batch of two, taps far outside the picture
        ((1, 5, 6, 5), 7, 2.0),  # the 7×7 branch on a map smaller than its kernel
        ((1, 3, 8, 8), 1, 1.5),  # the 1×1 deformable branches
        ((1, 2, 1, 1), 3, 0.7),  # one pixel: every tap but the centre's neighbourhood is outside
        ((1, 2, 1, 6), 3, 0.7),  # one-pixel-high rows (grid_sample's unit mapping at size 1)
    ],
)
def test_deformable_convolution_is_the_dcnv2_formula(
    shape: tuple[int, int, int, int], kernel: int, offset_scale: float
) -> None:
    gen = torch.Generator().manual_seed(sum(shape) + kernel)
    b, c, h, w = shape
    x = torch.randn(shape, generator=gen)
    offset = torch.randn(b, 2 * kernel * kernel, h, w, generator=gen) * offset_scale
    mask = 2 * torch.sigmoid(torch.randn(b, kernel * kernel, h, w, generator=gen))
    weight = torch.randn(5, c, kernel, kernel, generator=gen)
    bias = torch.randn(5, generator=gen)
    pad = (kernel // 2, kernel // 2)
    ours = deform_conv2d(x, offset, mask, weight, bias=bias, padding=pad)
    formula = deform_conv2d_formula(x, offset, weight, bias, padding=pad, mask=mask)
    assert ours.shape == (b, 5, h, w)
    assert float((ours - formula).abs().max()) <= 1e-5 * float(formula.abs().max())


def test_whole_pixel_offsets_and_the_one_pixel_border() -> None:
    """Integer offsets sample pixels exactly; a tap at -1 or at the size is outside (zero)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, 6, 6, generator=gen)
    weight = torch.randn(3, 2, 3, 3, generator=gen)
    mask = torch.ones(1, 9, 6, 6)
    for offset in (torch.randint(-7, 8, (1, 18, 6, 6), generator=gen).float(), torch.full((1, 18, 6, 6), -1.0)):
        ours = deform_conv2d(x, offset, mask, weight, padding=(1, 1))
        formula = deform_conv2d_formula(x, offset, weight, padding=(1, 1), mask=mask)
        assert torch.allclose(ours, formula, atol=1e-5)
    # Zero offsets, modulation 1: a plain convolution.
    plain = torch.nn.functional.conv2d(x, weight, padding=1)
    assert torch.allclose(deform_conv2d(x, torch.zeros(1, 18, 6, 6), mask, weight, padding=(1, 1)), plain, atol=1e-5)


def test_deformable_convolution_refuses_what_birefnet_does_not_use() -> None:
    x = torch.zeros(1, 4, 5, 5)
    with pytest.raises(ValueError, match="grouped weights"):
        deform_conv2d(x, torch.zeros(1, 18, 5, 5), torch.zeros(1, 9, 5, 5), torch.zeros(2, 2, 3, 3), padding=(1, 1))
    with pytest.raises(ValueError, match="one offset group"):
        deform_conv2d(x, torch.zeros(1, 36, 5, 5), torch.zeros(1, 9, 5, 5), torch.zeros(2, 4, 3, 3), padding=(1, 1))


def einops_split(x: Tensor, gh: int, gw: int) -> Tensor:
    """`b c (hg h) (wg w) -> b (c hg wg) h w` (the code since 5198d3f), as explicit indices."""
    b, c, height, width = x.shape
    h, w = height // gh, width // gw
    out = torch.empty(b, c * gh * gw, h, w)
    for ci in range(c):
        for row in range(gh):
            for col in range(gw):
                out[:, (ci * gh + row) * gw + col] = x[:, ci, row * h : (row + 1) * h, col * w : (col + 1) * w]
    return out


def test_patch_orders_are_the_two_revisions_of_the_original_split() -> None:
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(5))
    ref = torch.zeros(2, 1, 16, 32)  # a 4×3 grid of 16×32 patches
    trained = image_to_patches(x, (16, 32), PatchOrder.PATCH_MAJOR)
    current = image_to_patches(x, (16, 32), PatchOrder.CHANNEL_MAJOR)
    assert torch.equal(trained, get_patches_batch(x, ref))
    assert torch.equal(current, einops_split(x, 4, 3))
    assert not torch.equal(trained, current)  # the same 36 channels, in another order
    assert sorted(trained.flatten(2).sum(-1)[0].tolist()) == sorted(current.flatten(2).sum(-1)[0].tolist())
    assert TRAINED_ORDER is PatchOrder.PATCH_MAJOR
    with pytest.raises(ValueError, match="does not split"):
        image_to_patches(x, (15, 32), TRAINED_ORDER)


def _permute_patch_inputs(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The weights under which the channel-major network computes what the patch-major one does:
    each injection block's first conv with its input channels reordered (channel k of the
    channel-major stack is channel order[k] of the patch-major one)."""
    out = dict(state)
    for name, grid in (("ipt_blk5", 32), ("ipt_blk4", 16), ("ipt_blk3", 8), ("ipt_blk2", 4)):
        ids = torch.arange(3 * grid * grid, dtype=torch.float32).view(1, 3, grid, grid)  # a unique value per pixel
        patch_major = image_to_patches(ids, (1, 1), PatchOrder.PATCH_MAJOR).flatten().tolist()
        channel_major = image_to_patches(ids, (1, 1), PatchOrder.CHANNEL_MAJOR).flatten().tolist()
        where = {v: i for i, v in enumerate(patch_major)}
        order = torch.tensor([where[v] for v in channel_major])
        key = f"decoder.{name}.conv1.weight"
        out[key] = state[key][:, order]
    return out


def test_the_patch_order_only_reorders_the_injection_inputs() -> None:
    """The patch-major network equals the channel-major one with the injection blocks' inputs
    reordered: the order is all that differs between the two code revisions."""
    trained = random_network(1, PatchOrder.PATCH_MAJOR)
    state = trained.state_dict()
    with torch.device("meta"):
        current = birefnet_lite(PatchOrder.CHANNEL_MAJOR)
    current.load_state_dict(_permute_patch_inputs(state), assign=True)
    unpermuted = random_network(1, PatchOrder.CHANNEL_MAJOR)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        a, b, c = trained(x), current.eval()(x), unpermuted(x)
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(a.abs().max()))
    assert float((a - c).abs().max()) > 1e-2 * float(a.abs().max())  # the order matters


def test_the_key_layout_is_the_pinned_files() -> None:
    """Names, shapes and dtypes as in the original code; serialised as the published file was
    (safetensors with {"format": "pt"}), they make exactly the pinned file's 177,634,392 bytes."""
    with torch.device("meta"):
        model = birefnet_lite()
    expected = expected_tensors(model)
    assert len(expected) == 586
    assert expected["bb.patch_embed.proj.weight"] == ((96, 3, 4, 4), "F32")
    assert expected["bb.layers.2.blocks.5.attn.qkv.weight"] == ((1152, 384), "F32")
    assert expected["bb.layers.0.blocks.1.attn.relative_position_index"] == ((49, 49), "I64")
    assert expected["bb.norm3.weight"] == ((768,), "F32")
    assert expected["squeeze_module.0.conv_in.weight"] == ((64, 2880, 3, 3), "F32")
    assert expected["squeeze_module.0.dec_att.aspp_deforms.2.atrous_conv.offset_conv.weight"] == ((98, 64, 7, 7), "F32")
    assert expected["squeeze_module.0.dec_att.global_avg_pool.2.num_batches_tracked"] == ((), "I64")
    assert expected["decoder.ipt_blk5.conv1.weight"] == ((64, 3072, 3, 3), "F32")
    assert expected["decoder.decoder_block4.conv_in.weight"] == ((64, 1728, 3, 3), "F32")
    assert expected["decoder.gdt_convs_attn_2.0.weight"] == ((1, 16, 1, 1), "F32")
    assert expected["decoder.conv_out1.0.weight"] == ((1, 120, 1, 1), "F32")
    zeros = {
        k: torch.zeros(shape, dtype=torch.int64 if dt == "I64" else torch.float32)
        for k, (shape, dt) in expected.items()
    }
    assert len(save(zeros, metadata=METADATA)) == PINNED_SIZE
    assert sum(v.numel() for k, v in zeros.items() if v.dtype == torch.float32 and "running" not in k) > 44e6


def test_folded_batchnorm_computes_the_same_logits() -> None:
    model = random_network(2)
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        before = model(x)
        fold_batchnorm(model)
        after = model(x)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert torch.allclose(before, after, rtol=1e-4, atol=1e-4 * float(before.abs().max()))


def test_sides_must_be_multiples_of_32() -> None:
    model = random_network(3)
    with pytest.raises(ValueError, match="multiples of 32"):
        model(torch.zeros(1, 3, 64, 80))
