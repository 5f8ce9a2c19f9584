"""The any-size InSPyReNet matte pipeline (docs/MATTE.md).

Stand-in networks (plain functions) are used where the network is not the subject; the real
InSPyReNet Swin-B (random weights, published configuration) runs once on a small picture.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev.refinement import refined_one_tile_at_a_time
from craftai_infer.pipelines import matte_refine as refinement
from craftai_infer.pipelines.guided_filter import guided_filter
from craftai_infer.pipelines.matte_inspyrenet import (
    MatteSettings,
    fringe_shrink,
    matte_inspyrenet,
    matte_inspyrenet_float,
)
from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_refine import edge_tiles, refine_radius
from craftai_infer.pipelines.matte_spec import OutputsSpec
from craftai_infer.pipelines.picture_convert import to_rgb_uint8
from craftai_models.imagenet import MEAN as IMAGENET_MEAN
from craftai_models.imagenet import STD as IMAGENET_STD


def cutout(picture: np.ndarray, matte: np.ndarray) -> np.ndarray:
    """The naive cutout (the picture's colours, the matte as alpha), as image.matte makes it."""
    made = render(picture, matte, OutputsSpec(frozenset({"cutout"}), naive=True), "cpu").cutout
    assert made is not None
    return made


class RedChannel:
    """Stand-in network: the matte is the picture's red channel; records the inputs it saw."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x)
        return x[:, :1] * IMAGENET_STD[0] + IMAGENET_MEAN[0]


class RedThreshold(RedChannel):
    """Stand-in network with a realistic matte: 0 on the dark background, 1 on the bright disc."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return ((super().__call__(x) - 0.5) * 4 + 0.5).clamp(0, 1)


def disc_picture(h: int, w: int) -> np.ndarray:
    """A bright disc (the subject) on a dark textured background."""
    yy, xx = np.mgrid[0:h, 0:w]
    inside = (yy - h / 2) ** 2 + (xx - w / 2) ** 2 < (0.3 * min(h, w)) ** 2
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 40, (h, w, 3), dtype=np.uint8)
    rgb[inside] = [230, 200, 180]
    return rgb


@pytest.mark.parametrize(("h", "w"), [(1, 1), (17, 31), (720, 1280), (500, 1281), (3000, 4000)])
def test_matte_is_exactly_the_picture_size(h: int, w: int) -> None:
    net = RedThreshold()
    rgb = disc_picture(h, w)
    matte = matte_inspyrenet(rgb, net)
    assert matte.shape == (h, w) and matte.dtype == np.uint8
    (seen,) = net.seen
    if max(h, w) <= 1280:
        assert seen.shape[-2:] == (-(-h // 32) * 32, -(-w // 32) * 32)
    else:
        assert seen.shape[-2:] == (1280, 1280)
    assert cutout(rgb, matte).shape == (h, w, 4)


def test_small_pictures_are_reflect_padded_and_cropped_back() -> None:
    net = RedChannel()
    rgb = np.random.default_rng(1).integers(0, 256, (17, 31, 3), dtype=np.uint8)
    alpha = matte_inspyrenet_float(rgb, net)
    (seen,) = net.seen
    assert seen.shape == (1, 3, 32, 32)
    # Reflect padding (edge not repeated): padded row 17 is row 15, padded column 31 is column 29.
    assert torch.equal(seen[0, :, 17, :31], seen[0, :, 15, :31])
    assert torch.equal(seen[0, :, :17, 31], seen[0, :, :17, 29])
    # The matte is the network's answer on the picture's own pixels, not shifted.
    assert torch.allclose(alpha, torch.from_numpy(rgb[:, :, 0]).float() / 255, atol=1e-5)
    matte = matte_inspyrenet(rgb, net)
    expected = np.floor(fringe_shrink(torch.from_numpy(rgb[:, :, 0]).double() / 255).numpy() * 255 + 0.5)
    assert np.abs(matte.astype(int) - expected.astype(int)).max() <= 1


def test_large_pictures_are_reduced_and_enlarged_in_place() -> None:
    """1281×500: the square is reduced to 1280² and the matte comes back aligned (no refinement)."""
    h, w = 500, 1281
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([(xx * 255 // (w - 1)), (yy * 255 // (h - 1)), np.zeros_like(xx)], axis=2).astype(np.uint8)
    alpha = matte_inspyrenet_float(rgb, RedChannel()).numpy()
    assert np.abs(alpha - rgb[:, :, 0] / 255).max() < 0.01


def test_refinement_only_below_half_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []

    def spy(guide: torch.Tensor, p: torch.Tensor, r: int, eps: float) -> torch.Tensor:
        calls.append(tuple(p.shape))
        return guided_filter(guide, p, r, eps)

    monkeypatch.setattr(refinement, "guided_filter", spy)
    matte_inspyrenet(disc_picture(1200, 2560), RedThreshold())  # scale exactly 0.5: not refined
    assert calls == []
    matte_inspyrenet(disc_picture(1200, 2600), RedThreshold())
    assert calls, "refinement expected below half scale"
    # Only tiles near the disc's edge: fewer than all tiles of the picture.
    assert len(calls) < -(-1200 // 256) * -(-2600 // 256)


def test_edge_tiles_are_those_neither_all_0_nor_all_1() -> None:
    alpha = torch.zeros(1, 1, 40, 50)
    alpha[:, :, :, 25:] = 1.0  # a hard vertical edge at x=25
    # tiles 10×10, margin 2: the columns of tiles [20, 30) hold the edge, as do [30, 40) through the margin? no:
    # tile x0=30 sees x in [28, 42): all 1. Tile x0=20 sees [18, 32): both.
    assert edge_tiles(alpha, 10, 2, 0.01) == [(y, 20) for y in range(0, 40, 10)]
    alpha[:, :, :, 25:] = 0.995
    assert edge_tiles(alpha, 10, 2, 0.01) == [(y, 20) for y in range(0, 40, 10)]
    alpha[:, :, 0, 0] = 0.5  # one uncertain pixel in the first tile (and within the margin of none other)
    assert (0, 0) in edge_tiles(alpha, 10, 2, 0.01)
    alpha[:, :, 0, 0] = 0.005
    assert edge_tiles(alpha, 10, 0, 0.01) == [(y, 20) for y in range(0, 40, 10)]


def test_tiled_refinement_equals_filtering_the_whole_picture() -> None:
    rgb = disc_picture(300, 340)
    alpha = torch.zeros(1, 1, 300, 340)
    alpha[:, :, 80:220, 100:240] = 1.0
    alpha = torch.nn.functional.avg_pool2d(alpha, 9, 1, 4, count_include_pad=False)
    settings = MatteSettings(tile=64).refinement
    r = 5
    tiled = refinement.refine_edges(torch.from_numpy(rgb), alpha, r, settings)
    guide = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255
    whole = guided_filter(guide, alpha, r, settings.eps).clamp(0, 1)
    selected = torch.zeros_like(alpha, dtype=torch.bool)
    for y0, x0 in edge_tiles(alpha, 64, 2 * r, settings.edge_margin):
        selected[:, :, y0 : y0 + 64, x0 : x0 + 64] = True
    assert 0 < int(selected.sum()) < selected.numel()
    assert torch.allclose(tiled[selected], whole[selected], atol=1e-4)  # float32 sums in another order
    assert torch.equal(tiled[~selected], alpha[~selected])
    # Where tiles were skipped, the whole-picture filter changes almost nothing either.
    assert float((whole - alpha)[~selected].abs().max()) < 0.02


@pytest.mark.parametrize("per_call", [1, 3, 32])
def test_tiles_filtered_in_batches_answer_what_each_tile_answers_alone(
    monkeypatch: pytest.MonkeyPatch, per_call: int
) -> None:
    # 300x340 in tiles of 64: interior tiles, border tiles at the top and left (windows cut by the
    # picture), and short ones at the bottom and right: several layouts, some with many tiles
    rgb = torch.from_numpy(disc_picture(300, 340))
    alpha = torch.zeros(1, 1, 300, 340)
    alpha[:, :, 30:290, 20:330] = 1.0
    alpha[:, :, 120:180, 140:200] = 0.0
    alpha = torch.nn.functional.avg_pool2d(alpha, 21, 1, 10, count_include_pad=False)
    settings = MatteSettings(tile=64).refinement
    r = 5
    monkeypatch.setitem(refinement.TILES_PER_CALL, "cpu", per_call)
    tiles = edge_tiles(alpha, 64, 2 * r, settings.edge_margin)
    assert len(tiles) > 12
    batched = refinement.refine_edges(rgb, alpha, r, settings)
    alone = refined_one_tile_at_a_time(rgb, alpha, r, settings)
    assert float((alone - alpha).abs().max()) > 0.05  # the filter changed the tiles
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-6)


def test_refine_radius_units() -> None:
    assert refine_radius(1280 / 4000) == 10  # ⌈3 · 4000/1280⌉ = ⌈9.375⌉
    assert refine_radius(0.49) == 7
    assert refine_radius(0.99) == 4


def test_exif_rotated_portrait_gives_a_portrait_matte() -> None:
    """Stored 64×48 (landscape) with orientation 6 ("rotate 90° clockwise to view"): seen 48×64."""
    stored = Image.fromarray(disc_picture(48, 64))
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    stored.save(buffer, "JPEG", exif=exif.tobytes())
    picture = Image.open(io.BytesIO(buffer.getvalue()))
    assert picture.size == (64, 48)
    rgb = to_rgb_uint8(picture)
    assert rgb.shape == (64, 48, 3)
    assert matte_inspyrenet(rgb, RedThreshold()).shape == (64, 48)


def test_refuses_what_is_not_an_rgb_uint8_picture() -> None:
    with pytest.raises(ValueError, match="uint8"):
        matte_inspyrenet(np.zeros((4, 4), np.uint8), RedChannel())
    with pytest.raises(ValueError, match="uint8"):
        matte_inspyrenet(np.zeros((4, 4, 3), np.float32), RedChannel())
    with pytest.raises(ValueError, match="do not fit"):
        cutout(np.zeros((4, 4, 3), np.uint8), np.zeros((4, 5), np.uint8))


def test_cutout_keeps_colours_and_uses_the_matte_as_alpha() -> None:
    rgb = np.array([[[10, 20, 30], [40, 50, 60]]], np.uint8)
    matte = np.array([[0, 255]], np.uint8)
    assert cutout(rgb, matte).tolist() == [[[10, 20, 30, 0], [40, 50, 60, 255]]]


@pytest.mark.slow
def test_the_real_network_on_a_small_picture() -> None:
    """InSPyReNet Swin-B as published (base_size 1024², random weights) through the pipeline."""
    from craftai_models.inspyrenet import inspyrenet_swin_b

    torch.manual_seed(0)
    net = inspyrenet_swin_b().eval()
    rgb = disc_picture(17, 31)
    matte = matte_inspyrenet(rgb, net)
    assert matte.shape == (17, 31) and matte.dtype == np.uint8
    # min-max normalised before the shrink: something is fully opaque, something fully clear
    assert matte.max() == 255 and matte.min() == 0
