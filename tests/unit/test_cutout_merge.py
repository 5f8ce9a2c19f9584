"""A matte fixed with keep and remove regions (craftai_infer.pipelines.cutout_merge) on real photos,
with regions made here (a disc, a polygon, and SAM-like irregular regions thresholded from the
picture): the rule of the module's docstring, written again here on the whole picture, against
`merged`, which filters each region on its grown box only; the feathered edge moving onto the
picture's edges; the colours estimated again only where alpha changed; and `refined` with no
region answering what image.matte's `render` answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage  # type: ignore[import-untyped]
from torch import Tensor

from craftai_infer.pipelines import cutout_merge
from craftai_infer.pipelines.cutout_merge import COLOUR_MARGIN, Region, feather_radius, feathered, merged
from craftai_infer.pipelines.matte_outputs import cutout, render
from craftai_infer.pipelines.matte_spec import Blur, OutputsSpec, Solid

U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]
SQUARE = np.ones((3, 3), dtype=bool)  # the filter's windows are squares: distances are Chebyshev's
# How far a region filtered on its grown box lands from the whole picture's filter (float32 rounding:
# the guide centred on the box's mean, the windows summed from the box's running sums); measured up
# to 2.1e-4, at high-contrast edges, over 160 regions of the four photos.


# ------------------------------------------------------------------------------------------------
# pictures, mattes and regions


def _pixels(photos: dict[str, Path], name: str) -> U8:
    return np.array(Image.open(photos[name]).convert("RGB"))


def _luminance(pixels: U8) -> npt.NDArray[np.float64]:
    return np.asarray(pixels.astype(np.float64) @ np.array([0.299, 0.587, 0.114]), dtype=np.float64)


def _matte(pixels: U8) -> U8:
    """A soft matte with every level: the darker part of the picture, blurred (a model's matte has
    soft edges; the merge rule must keep its bytes where no region reaches)."""
    gray = _luminance(pixels)
    hard = Image.fromarray(((gray < np.percentile(gray, 45)) * 255).astype(np.uint8))
    return np.array(hard.filter(ImageFilter.GaussianBlur(4)))


def _disc(pixels: U8) -> Mask:
    h, w = pixels.shape[:2]
    yy, xx = np.mgrid[:h, :w]
    return np.asarray((yy - 0.45 * h) ** 2 + (xx - 0.55 * w) ** 2 < (min(h, w) / 4) ** 2)


def _polygon(pixels: U8) -> Mask:
    h, w = pixels.shape[:2]
    drawn = Image.new("1", (w, h))
    corners = [(0.1, 0.2), (0.6, 0.1), (0.7, 0.5), (0.45, 0.8), (0.2, 0.6)]
    ImageDraw.Draw(drawn).polygon([(x * w, y * h) for x, y in corners], fill=1)
    return np.array(drawn, dtype=bool)


def _sam_like(pixels: U8, centre: tuple[float, float] = (0.5, 0.4), darker: bool = True) -> Mask:
    """What SAM answers for a click, roughly: the connected part of the picture like the clicked
    pixels (darker or lighter than the median near the click), holes filled, within a window."""
    h, w = pixels.shape[:2]
    gray = _luminance(pixels)
    cy, cx = int(centre[1] * h), int(centre[0] * w)
    yy, xx = np.mgrid[:h, :w]
    window = (np.abs(yy - cy) < h // 3) & (np.abs(xx - cx) < w // 3)
    level = np.median(gray[window])
    alike = ((gray < level) if darker else (gray > level)) & window
    alike = ndimage.binary_opening(alike, structure=SQUARE, iterations=2)
    labels, count = ndimage.label(alike)
    if count == 0:
        raise AssertionError("no region near the click")
    sizes = ndimage.sum_labels(alike, labels, index=np.arange(1, count + 1))
    return np.asarray(ndimage.binary_fill_holes(labels == 1 + int(np.argmax(sizes))), dtype=bool)


REGIONS: dict[str, Callable[[U8], Mask]] = {
    "disc": _disc,
    "polygon": _polygon,
    "darker part": _sam_like,
    "lighter part": lambda pixels: _sam_like(pixels, (0.6, 0.6), darker=False),
}


def _reach(mask: Mask, radius: int) -> Mask:
    """The mask grown by 2r: where its feathered region may be above zero."""
    return np.asarray(ndimage.binary_dilation(mask, structure=SQUARE, iterations=2 * radius), dtype=bool)


def _core(mask: Mask, radius: int) -> Mask:
    """The mask shrunk by 2r (windows end at the picture's border: nothing outside it is removed)."""
    return np.asarray(ndimage.binary_erosion(mask, structure=SQUARE, iterations=2 * radius, border_value=1), dtype=bool)


def _rule(matte: Tensor, rgb: Tensor, regions: list[Region], radius: int) -> tuple[Tensor, Tensor]:
    """The module's rule with every region feathered on the whole picture: (255 a before rounding,
    round(255 a) half up)."""
    alpha = matte.to(torch.float32) / 255.0
    for region in regions:
        soft = feathered(rgb, region.mask, radius)
        alpha = torch.maximum(alpha, soft) if region.keep else torch.minimum(alpha, 1.0 - soft)
    return _rounded(alpha)


def _rounded(alpha: Tensor) -> tuple[Tensor, Tensor]:
    """(255 a, round(255 a) half up as bytes)."""
    scaled = alpha * 255.0
    return scaled, torch.floor(scaled + 0.5).clamp(0, 255).to(torch.uint8)


# ------------------------------------------------------------------------------------------------
# the rule


@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("shape", list(REGIONS))
@pytest.mark.parametrize("keep", [True, False], ids=["keep", "remove"])
def test_a_region_changes_the_matte_only_within_its_reach_and_only_one_way(
    photos: dict[str, Path], name: str, shape: str, keep: bool
) -> None:
    pixels = _pixels(photos, name)
    matte = _matte(pixels)
    mask = REGIONS[shape](pixels)
    radius = feather_radius(*mask.shape)
    reach, core = _reach(mask, radius), _core(mask, radius)
    assert core.any() and not reach.all(), f"the {shape} region is trivial on {name}"
    before = torch.from_numpy(matte)
    after = merged(before, torch.from_numpy(pixels), [Region(keep, torch.from_numpy(mask))], radius).numpy()
    assert np.array_equal(after[~reach], matte[~reach])  # beyond its reach: the matte's own bytes
    if keep:
        assert (after >= matte).all() and (after[core] == 255).all()
    else:
        assert (after <= matte).all() and (after[core] == 0).all()
    changed = after != matte
    assert changed.any() and changed[reach].sum() == changed.sum()
    soft = feathered(torch.from_numpy(pixels), torch.from_numpy(mask), radius).numpy()
    assert soft.min() >= 0.0 and soft.max() <= 1.0 and (soft[~reach] == 0).all()
    assert (soft[core] >= 1.0 - 2**-20).all()  # 1 but for the rounding of the windows' running sums


@pytest.mark.parametrize("name", PHOTOS)
def test_a_region_whose_grown_box_is_the_picture_answers_the_rule_exactly(photos: dict[str, Path], name: str) -> None:
    """The crop is the whole picture: `merged` and the rule written here are the same computation
    (this checks the reference the next tests use)."""
    pixels = _pixels(photos, name)
    h, w = pixels.shape[:2]
    cross = np.zeros((h, w), dtype=bool)
    cross[h // 2 - 20 : h // 2 + 20, :] = True
    cross[:, w // 2 - 20 : w // 2 + 20] = True
    rgb, before = torch.from_numpy(pixels), torch.from_numpy(_matte(pixels))
    radius = feather_radius(h, w)
    for regions in ([Region(True, torch.from_numpy(cross))], [Region(False, torch.from_numpy(cross))]):
        assert torch.equal(merged(before, rgb, regions, radius), _rule(before, rgb, regions, radius)[1])


@dataclass(frozen=True)
class Cropped:
    """One region merged on its grown box, beside the rule on the whole picture."""

    name: str
    got: Tensor  # merged's bytes
    scaled: Tensor  # the rule's 255 a, before rounding
    expected: Tensor  # the rule's bytes
    feather_gap: float  # the largest gap between the region feathered on its box and on the whole picture
    reached: int  # pixels within the region's reach


@pytest.fixture(scope="module")
def cropped(photos: dict[str, Path]) -> list[Cropped]:
    """Every region of REGIONS on every photo, kept on an empty matte and removed from a full one (the
    feathered region decides every byte it reaches), and kept on a soft matte."""
    cases = []
    for name in PHOTOS:
        pixels = _pixels(photos, name)
        rgb = torch.from_numpy(pixels)
        radius = feather_radius(*pixels.shape[:2])
        mattes = {
            "kept on an empty matte": (np.zeros(pixels.shape[:2], np.uint8), True),
            "removed from a full matte": (np.full(pixels.shape[:2], 255, np.uint8), False),
            "kept on a soft matte": (_matte(pixels), True),
        }
        for shape, make in REGIONS.items():
            mask = make(pixels)
            region = torch.from_numpy(mask)
            box = cutout_merge._grown_box(region, 4 * radius)
            assert box is not None
            top, bottom, left, right = box
            whole = feathered(rgb, region, radius)  # the rule's R_k
            on_box = feathered(rgb[top:bottom, left:right], region[top:bottom, left:right], radius)
            gap = float((on_box - whole[top:bottom, left:right]).abs().max())
            assert (bottom - top, right - left) != pixels.shape[:2], f"the {shape} region's box is {name}: no crop"
            reached = int(_reach(mask, radius).sum())
            for how, (matte, keep) in mattes.items():
                before = torch.from_numpy(matte)
                alpha = before.to(torch.float32) / 255.0
                alpha = torch.maximum(alpha, whole) if keep else torch.minimum(alpha, 1.0 - whole)
                scaled, expected = _rounded(alpha)
                got = merged(before, rgb, [Region(keep, region)], radius)
                cases.append(Cropped(f"{shape} {how}, {name}", got, scaled, expected, gap, reached))
    return cases


def test_merging_on_the_grown_box_answers_what_the_whole_picture_would(cropped: list[Cropped]) -> None:
    """merged's own claim: a region filtered on its grown box is the region filtered on the whole
    picture, so the answer is the rule's to the byte."""
    differing = {case.name: int((case.got != case.expected).sum()) for case in cropped}
    gaps = [case.feather_gap for case in cropped if case.feather_gap > 0]
    assert sum(differing.values()) == 0 and not gaps, (
        f"bytes that differ from the rule's: { ({name: n for name, n in differing.items() if n}) }; the "
        f"feathered regions differ in {len(gaps)} of {len(cropped)} cases, by up to {max(gaps, default=0.0):.3g}"
    )


@pytest.mark.parametrize("name", ["chelsea.png", "rocket.jpg"])
def test_regions_apply_in_order(photos: dict[str, Path], name: str) -> None:
    """Keep A then remove B is not remove B then keep A where they overlap: the last one asked
    wins there; beyond the last one's reach the answer is the first one's alone."""
    pixels = _pixels(photos, name)
    rgb, before = torch.from_numpy(pixels), torch.from_numpy(_matte(pixels))
    radius = feather_radius(*before.shape)
    a, b = _disc(pixels), _polygon(pixels)
    both = _core(a, radius) & _core(b, radius)
    assert both.any(), "the regions do not overlap"
    keep_a, remove_b = Region(True, torch.from_numpy(a)), Region(False, torch.from_numpy(b))
    keep_then_remove = merged(before, rgb, [keep_a, remove_b], radius).numpy()
    remove_then_keep = merged(before, rgb, [remove_b, keep_a], radius).numpy()
    assert (keep_then_remove[both] == 0).all() and (remove_then_keep[both] == 255).all()
    beyond_b, beyond_a = ~_reach(b, radius), ~_reach(a, radius)
    assert np.array_equal(keep_then_remove[beyond_b], merged(before, rgb, [keep_a], radius).numpy()[beyond_b])
    assert np.array_equal(remove_then_keep[beyond_a], merged(before, rgb, [remove_b], radius).numpy()[beyond_a])
    # where neither reaches, both orders keep the matte's bytes
    neither = beyond_a & beyond_b
    assert np.array_equal(keep_then_remove[neither], before.numpy()[neither])
    assert np.array_equal(remove_then_keep[neither], before.numpy()[neither])


# ------------------------------------------------------------------------------------------------
# the feathered edge


def _crossing(soft: Tensor) -> int:
    """The first column of the middle row where the feathered region falls below one half."""
    row = soft[soft.shape[0] // 2].numpy()
    below = np.flatnonzero(row < 0.5)
    return int(below[0])


@pytest.mark.parametrize("width", [1024, 2048])
def test_the_feathered_edge_moves_onto_the_pictures_edge(width: int) -> None:
    """A picture of two colours meeting at column E, and masks whose edge is d pixels off E: the
    feathered region's one-half crossing lands on E from one pixel off, moves towards E and never
    past it from 2 to r - 1 pixels off, and stays at the mask's edge beyond the filter's reach (2r);
    on a picture of one colour it stays at the mask's edge. Measured: with r = 4 (1024 wide), 1 pixel
    off lands on E and 2 or 3 pixels off end 1 pixel nearer; with r = 8 (2048 wide), up to 3 pixels
    off land on E and 4 to 7 pixels off end 1 to 3 pixels nearer."""
    height, edge = 16, width // 2  # every row alike
    radius = feather_radius(height, width)
    assert radius == width // 256
    two = np.zeros((height, width, 3), np.uint8)
    two[:, :edge] = (200, 60, 40)
    two[:, edge:] = (30, 90, 210)
    one = np.full((height, width, 3), (120, 110, 100), np.uint8)
    moved = {}
    for offset in [d for d in range(-2 * radius - 2, 2 * radius + 3) if d != 0]:
        mask = torch.zeros(height, width, dtype=torch.bool)
        mask[:, : edge + offset] = True
        assert _crossing(feathered(torch.from_numpy(one), mask, radius)) - edge == offset  # no edge: the mask's own
        moved[offset] = _crossing(feathered(torch.from_numpy(two), mask, radius)) - edge
    for offset, landed in moved.items():
        if abs(offset) == 1:
            assert landed == 0, moved
        elif abs(offset) < radius:
            assert abs(landed) < abs(offset) and landed * offset >= 0, moved
        elif abs(offset) > 2 * radius:
            assert landed == offset, moved


# ------------------------------------------------------------------------------------------------
# the colours


@pytest.mark.parametrize("name", ["astronaut.png", "coffee.png"])
def test_colours_are_estimated_again_only_where_alpha_changed(photos: dict[str, Path], name: str) -> None:
    pixels = _pixels(photos, name)
    rgb, before = torch.from_numpy(pixels), torch.from_numpy(_matte(pixels))
    colours = cutout(rgb, before)[:, :, :3]  # what the session kept at the open
    kept = colours.clone()
    after = merged(before, rgb, [Region(True, torch.from_numpy(_sam_like(pixels)))], feather_radius(*before.shape))
    changed = after != before
    assert changed.any() and not changed.all()
    fresh = cutout_merge.refreshed_colours(rgb, after, colours, changed)
    assert torch.equal(colours, kept)  # the kept colours are not written over
    assert torch.equal(fresh[~changed], colours[~changed])  # every other byte as it was
    # where alpha changed: the estimate for the new alpha on the changed pixels' box grown by COLOUR_MARGIN
    rows, cols = np.flatnonzero(changed.any(dim=1).numpy()), np.flatnonzero(changed.any(dim=0).numpy())
    top, left = max(0, rows[0] - COLOUR_MARGIN), max(0, cols[0] - COLOUR_MARGIN)
    bottom, right = rows[-1] + 1 + COLOUR_MARGIN, cols[-1] + 1 + COLOUR_MARGIN
    estimated = cutout(rgb[top:bottom, left:right], after[top:bottom, left:right])[:, :, :3]
    box_changed = changed[top:bottom, left:right]
    assert torch.equal(fresh[top:bottom, left:right][box_changed], estimated[box_changed])
    assert not torch.equal(fresh[changed], colours[changed])  # they were estimated again indeed
    nothing = torch.zeros_like(changed)
    assert torch.equal(cutout_merge.refreshed_colours(rgb, after, colours, nothing), colours)


# ------------------------------------------------------------------------------------------------
# refined


SPECS = {
    "matte, cutout, composite over a blur, mask": OutputsSpec(
        frozenset({"matte", "cutout", "composite", "mask"}), background=Blur(6.0), threshold=0.4
    ),
    "cutout over a solid colour": OutputsSpec(frozenset({"cutout", "composite"}), background=Solid((0, 128, 0, 255))),
    "naive cutout": OutputsSpec(frozenset({"matte", "cutout"}), naive=True),
}


def _with_alpha(pixels: U8) -> U8:
    """The picture with an alpha channel of its own (a transparent picture's matte is multiplied by it)."""
    h, w = pixels.shape[:2]
    ramp = np.broadcast_to(np.linspace(255, 64, w).astype(np.uint8), (h, w))
    return np.ascontiguousarray(np.dstack([pixels, ramp]))


def _colours(picture: U8, matte: U8) -> U8:
    """The cutout's colours as the open made them (render's own cutout), which the session keeps."""
    made = render(picture, matte, OutputsSpec(frozenset({"cutout"})), "cpu").cutout
    assert made is not None
    return np.ascontiguousarray(made[:, :, :3])


@pytest.mark.parametrize("name", ["chelsea.png", "rocket.jpg"])
@pytest.mark.parametrize("spec_name", list(SPECS))
@pytest.mark.parametrize("transparent", [False, True], ids=["rgb", "rgba"])
def test_refined_without_regions_answers_what_render_does(
    photos: dict[str, Path], name: str, spec_name: str, transparent: bool
) -> None:
    spec = SPECS[spec_name]
    pixels = _pixels(photos, name)
    matte = _matte(pixels)
    picture = _with_alpha(pixels) if transparent else pixels
    opened = render(picture, matte, spec, "cpu")
    colours = None if spec.naive else _colours(picture, matte)
    answer, changed = cutout_merge.refined(picture, matte, colours, spec, [], device="cpu")
    assert changed == 0
    for kind in ("matte", "cutout", "composite", "mask"):
        ours, theirs = getattr(answer, kind), getattr(opened, kind)
        assert (ours is None) == (theirs is None), kind
        if ours is not None:
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), kind


@pytest.mark.parametrize("name", ["chelsea.png", "rocket.jpg"])
def test_refined_answers_the_merged_matte_and_counts_the_pixels_it_changed(photos: dict[str, Path], name: str) -> None:
    pixels = _pixels(photos, name)
    matte = _matte(pixels)
    spec = OutputsSpec(frozenset({"matte", "cutout"}))
    opened = render(pixels, matte, spec, "cpu")
    assert opened.cutout is not None
    colours = np.ascontiguousarray(opened.cutout[:, :, :3])
    mask = _sam_like(pixels, (0.6, 0.6), darker=False)
    answer, changed = cutout_merge.refined(pixels, matte, colours, spec, [(True, mask)], device="cpu")
    rgb = torch.from_numpy(pixels)
    expected = merged(torch.from_numpy(matte), rgb, [Region(True, torch.from_numpy(mask))], feather_radius(*mask.shape))
    assert answer.matte is not None and answer.cutout is not None
    assert np.array_equal(answer.matte, expected.numpy())
    assert changed == int((answer.matte != matte).sum()) > 0
    same = answer.matte == matte
    assert np.array_equal(answer.cutout[same], opened.cutout[same])  # colours and alpha as opened
    assert np.array_equal(answer.cutout[:, :, 3], answer.matte)
