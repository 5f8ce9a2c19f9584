"""The mask decoder's upscaling as matrix products (`masks_subpixel`, what the compiled grid batches
run) answers what its layers answer (`masks_by_pixels`, the paper's transposed convolutions)."""

from __future__ import annotations

import torch

from craftai_models.sam2.mask_decoder import MaskDecoder


def _inputs(batch: int, feats_batch: int, grid: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    h, w = grid
    g = torch.Generator().manual_seed(7)
    keys = torch.randn(batch, h * w, 256, generator=g)
    hyper = torch.randn(batch, 4, 32, generator=g)
    feats_0 = torch.randn(feats_batch, 32, 4 * h, 4 * w, generator=g)
    feats_1 = torch.randn(feats_batch, 64, 2 * h, 2 * w, generator=g)
    return keys, hyper, feats_0, feats_1


def _decoder() -> MaskDecoder:
    decoder = MaskDecoder(256).eval()
    with torch.no_grad():  # layer norm and biases away from their identity initialisation
        for p in decoder.output_upscaling.parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p is decoder.output_upscaling[1].weight else 0.0))
    return decoder


def test_subpixel_upscaling_equals_the_transposed_convolutions() -> None:
    decoder = _decoder()
    # a non-square grid, so that rows and columns cannot be swapped unseen; the picture's features
    # at batch 1 (broadcast over the prompts, as the grid feeds them) and at the prompts' batch
    for feats_batch in (1, 3):
        keys, hyper, feats_0, feats_1 = _inputs(3, feats_batch, (4, 6))
        with torch.inference_mode():
            by_pixels = decoder.masks_by_pixels(keys, hyper, (4, 6), feats_0, feats_1)
            subpixel = decoder.masks_subpixel(keys, hyper, (4, 6), feats_0, feats_1)
        assert subpixel.shape == by_pixels.shape == (3, 4, 16, 24)
        assert subpixel.is_contiguous()
        assert by_pixels.abs().mean() > 1.0  # not a trivial map: logits of both signs, O(1) and more
        assert (by_pixels > 0).float().mean().item() > 0.2
        assert (by_pixels < 0).float().mean().item() > 0.2
        torch.testing.assert_close(subpixel, by_pixels, rtol=1e-4, atol=1e-4)


def test_the_whole_decoder_answers_the_same_either_way() -> None:
    decoder = _decoder()
    g = torch.Generator().manual_seed(3)
    image = torch.randn(1, 256, 8, 8, generator=g)
    pe = torch.randn(1, 256, 8, 8, generator=g)
    sparse = torch.randn(5, 3, 256, generator=g)
    dense = torch.randn(5, 256, 8, 8, generator=g)
    feats = {
        "high_res_feats_0": torch.randn(1, 32, 32, 32, generator=g),
        "high_res_feats_1": torch.randn(1, 64, 16, 16, generator=g),
    }
    with torch.inference_mode():
        masks, iou = decoder(image, pe, sparse, dense, **feats)
        masks_sp, iou_sp = decoder(image, pe, sparse, dense, **feats, subpixel=True)
    assert masks.shape == (5, 4, 32, 32)
    torch.testing.assert_close(iou_sp, iou)
    torch.testing.assert_close(masks_sp, masks, rtol=1e-4, atol=1e-4)
