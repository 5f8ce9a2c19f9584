"""image.matte's outputs made from a matte (craftai_infer.pipelines.matte_outputs): the composite's
premultiplied integer arithmetic against a hand-computed case, the mask's threshold, the blur and
the cover scaling against Pillow, the alpha of transparent pictures, and what `render` answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter

from craftai_infer.pipelines import matte_outputs as outputs
from craftai_infer.pipelines.matte_spec import Blur, Cover, OutputsSpec, Solid

U8 = torch.uint8

# A 2x2 cutout: (colour, alpha) per pixel, and the results worked out by hand from
# n = F·A·255 + C_b·A_b·(255 − A), d = A·255 + A_b·(255 − A), colour = ⌊n/d + ½⌋, alpha = ⌊d/255 + ½⌋.
LAYER = [[(200, 100, 50, 128), (10, 20, 30, 0)], [(255, 255, 255, 255), (0, 0, 0, 64)]]
# Over opaque blue (0, 0, 255, 255): p00 R = ⌊200·128/255 + ½⌋ = ⌊100.39⌋ = 100, G = ⌊50.20 + ½⌋ = 50,
# B = ⌊(50·128 + 255·127)/255 + ½⌋ = ⌊152.10 + ½⌋ = 152; p01 (alpha 0) is the background; p10 is the
# subject; p11 B = 255·191/255 = 191.
OVER_OPAQUE = [[(100, 50, 152), (0, 0, 255)], [(255, 255, 255), (0, 0, 191)]]
# Over half-transparent blue (0, 0, 255, 128): p00 d = 128·255 + 128·127 = 48,896, R = 200·128·255/d
# = 133.51 -> 134, G = 66.75 -> 67, B = (50·128·255 + 255·128·127)/d = 118.15 -> 118, alpha 191.75 -> 192;
# p01 d = 32,640: the background, alpha 128; p10 opaque; p11 d = 16,320 + 24,448 = 40,768,
# B = 255·128·191/d = 152.92 -> 153, alpha 159.87 -> 160.
OVER_HALF = [[(134, 67, 118, 192), (0, 0, 255, 128)], [(255, 255, 255, 255), (0, 0, 153, 160)]]


def _t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=U8)


def test_the_composite_is_exact_premultiplied_arithmetic() -> None:
    layer = _t(LAYER)
    opaque = outputs.composite(layer, _t([(0, 0, 255, 255)] * 2).expand(2, 2, 4), opaque=True)
    assert opaque.tolist() == [[list(p) for p in row] for row in OVER_OPAQUE]
    half = outputs.composite(layer, _t([(0, 0, 255, 128)] * 2).expand(2, 2, 4), opaque=False)
    assert half.tolist() == [[list(p) for p in row] for row in OVER_HALF]


def test_over_a_fully_transparent_background_the_composite_is_the_cutout_where_it_shows() -> None:
    layer = _t(LAYER)
    clear = outputs.composite(layer, torch.zeros((2, 2, 4), dtype=U8), opaque=False)
    assert clear[0, 0].tolist() == [200, 100, 50, 128] and clear[1, 1].tolist() == [0, 0, 0, 64]
    assert clear[0, 1].tolist() == [0, 0, 0, 0]  # nothing over nothing


def test_the_mask_selects_alpha_above_the_threshold() -> None:
    alpha = _t([[0, 1, 127, 128, 254, 255]])
    assert outputs.hard_mask(alpha, 0.5).tolist() == [[False, False, False, True, True, True]]
    assert outputs.hard_mask(alpha, 0.0).tolist() == [[False, True, True, True, True, True]]
    assert outputs.hard_mask(alpha, 1.0).tolist() == [[False] * 6]  # nothing is above full alpha
    assert outputs.mask_level(128 / 255) == 129 and outputs.mask_level(0.5) == 128


def test_a_transparent_pictures_alpha_multiplies_the_matte_rounded_down() -> None:
    picture = _t([[(10, 20, 30, 128), (10, 20, 30, 255)]])
    assert outputs.combined_alpha(_t([[255, 100]]), picture).tolist() == [[128, 100]]
    assert outputs.combined_alpha(_t([[3, 100]]), picture).tolist() == [[1, 100]]  # 3·128/255 = 1.5 -> 1


def test_the_naive_cutout_keeps_the_pictures_colours() -> None:
    rgb = _t([[(10, 20, 30), (40, 50, 60)]])
    assert outputs.cutout(rgb, _t([[0, 255]]), naive=True).tolist() == [[[10, 20, 30, 0], [40, 50, 60, 255]]]


@pytest.mark.parametrize("sigma", [1.0, 2.0, 3.0, 8.0, 20.0])
def test_the_blur_is_pillows_gaussian_blur_within_rounding(photos: dict[str, Path], sigma: float) -> None:
    """Pillow's GaussianBlur(radius) is itself three extended box blurs; away from the borders
    (Pillow repeats the edge pixel, this renormalises) both are the same Gaussian to ~1/255."""
    picture = Image.open(photos["chelsea.png"]).convert("RGB").crop((0, 0, 200, 150))
    ours = outputs.gaussian_blur(torch.from_numpy(np.array(picture)), sigma).numpy().astype(int)
    theirs = np.asarray(picture.filter(ImageFilter.GaussianBlur(sigma))).astype(int)
    margin = int(3 * sigma) + 2
    diff = np.abs(ours - theirs)[margin:-margin, margin:-margin]
    assert diff.mean() <= 0.6 and diff.max() <= 4, (diff.mean(), diff.max())


def test_box_sizes_follow_kovesi() -> None:
    assert outputs.box_sizes(8.0) == [15, 15, 17]  # variances (w² − 1)/12 add up to 61 ≈ 8²
    sizes = outputs.box_sizes(20.0)
    assert abs(sum((w * w - 1) / 12 for w in sizes) - 400) < 12


@pytest.mark.parametrize("size", [(451, 300), (200, 300), (1000, 300), (40, 50)])
def test_a_background_picture_covers_like_pillows_resize_and_crop(
    photos: dict[str, Path], size: tuple[int, int]
) -> None:
    background = Image.open(photos["coffee.png"]).convert("RGB")
    width, height = size
    ours = outputs.cover(torch.from_numpy(np.array(background)), height, width).numpy().astype(int)
    w, h = background.size
    scale = max(width / w, height / h)
    rw, rh = max(width, round(w * scale)), max(height, round(h * scale))
    left, top = (rw - width) // 2, (rh - height) // 2
    resized = background.resize((rw, rh), Image.Resampling.BICUBIC).crop((left, top, left + width, top + height))
    theirs = np.asarray(resized.convert("RGBA")).astype(int)
    assert ours.shape == (height, width, 4) and (ours[:, :, 3] == 255).all()
    diff = np.abs(ours - theirs)  # Pillow rounds to 8 bits between its two passes
    assert diff.mean() <= 0.3 and np.percentile(diff, 99.9) <= 4, (diff.mean(), diff.max())


def test_a_transparent_background_picture_is_scaled_premultiplied() -> None:
    """A red pixel next to a transparent black one must not darken into it when scaled."""
    picture = np.zeros((2, 2, 4), np.uint8)
    picture[:, 0] = (255, 0, 0, 255)
    scaled = outputs.cover(torch.from_numpy(picture), 8, 8).numpy()
    visible = scaled[:, :, 3] > 0
    assert (scaled[visible][:, 0] >= 250).all() and (scaled[visible][:, 1:3] == 0).all()
    assert not Cover(picture).opaque and Cover(picture[:, :1]).opaque


def test_render_answers_every_output_asked_as_host_arrays() -> None:
    rng = np.random.default_rng(3)
    picture = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    matte = np.zeros((24, 32), np.uint8)
    matte[6:18, 8:24] = 255
    matte[5, 8:24] = 100
    spec = OutputsSpec(frozenset({"matte", "cutout", "composite", "mask"}), background=Solid((0, 255, 0, 255)))
    made = outputs.render(picture, matte, spec, "cpu")
    assert made.matte is not None and made.cutout is not None and made.composite is not None and made.mask is not None
    assert np.array_equal(made.matte, matte)
    assert made.cutout.shape == (24, 32, 4) and made.composite.shape == (24, 32, 3)
    assert np.array_equal(made.cutout[:, :, 3], matte) and np.array_equal(made.mask, matte > 127)
    assert np.array_equal(made.cutout[10, 10, :3], picture[10, 10])  # alpha 255: the picture's colour
    assert (made.composite[0, 0] == (0, 255, 0)).all()
    only = outputs.render(picture, matte, OutputsSpec(frozenset({"mask"}), threshold=0.9), "cpu")
    assert only.matte is None and only.cutout is None and only.mask is not None and only.mask.sum() == 16 * 12
    blurred = outputs.render(picture, matte, OutputsSpec(frozenset({"composite"}), background=Blur(2.0)), "cpu")
    assert blurred.composite is not None and blurred.composite.shape == (24, 32, 3)
    with pytest.raises(ValueError, match="do not fit"):
        outputs.render(picture, matte[:, :5], spec, "cpu")
