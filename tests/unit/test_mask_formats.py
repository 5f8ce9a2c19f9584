"""Mask formats (craftai_infer.pipelines.mask_formats, craftai_infer.masks) against COCO's own
reader and writer (pycocotools, test-only), and the SDK's readers of them (craftai.outputs)."""

from __future__ import annotations

import numpy as np
import pycocotools.mask as coco  # type: ignore[import-untyped]
import pytest

from craftai.outputs import mask_output
from craftai_infer import masks as answers
from craftai_infer.pipelines import mask_formats

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")


def _masks() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    found = [rng.random((h, w)) < p for h, w, p in ((1, 1, 0.5), (5, 3, 0.5), (40, 27, 0.1), (33, 64, 0.9))]
    found += [np.zeros((6, 4), bool), np.ones((6, 4), bool)]
    big = np.zeros((3000, 2000), bool)
    big[100:2900, 5:1990] = True
    big[500:600, 700:800] = False  # runs of millions of pixels, and deltas of both signs
    return [*found, big]


@pytest.mark.parametrize("index", range(7))
def test_rle_is_coco_s(index: int) -> None:
    mask = _masks()[index]
    h, w = mask.shape
    counts = mask_formats.rle_counts(mask)
    theirs = coco.encode(np.asfortranarray(mask.astype(np.uint8)))
    assert mask_formats.rle_string(counts) == theirs["counts"]
    assert coco.frPyObjects({"size": [h, w], "counts": counts.tolist()}, h, w)["counts"] == theirs["counts"]
    assert np.array_equal(coco.decode({"size": [h, w], "counts": mask_formats.rle_string(counts)}), mask)
    assert mask_formats.area(counts) == int(mask.sum()) == int(coco.area(theirs))
    assert np.array_equal(answers.decode_counts(counts, h, w), mask)


def test_box_is_the_pixels_extent() -> None:
    mask = np.zeros((10, 12), bool)
    mask[2:5, 3:4] = True
    mask[7, 9] = True
    assert mask_formats.box(mask) == (3, 2, 10, 8)
    assert mask_formats.box(np.zeros((3, 3), bool)) == (0, 0, 0, 0)


def test_polygons_have_their_holes_and_islands_in_holes_are_regions() -> None:
    mask = np.zeros((50, 60), bool)
    mask[5:40, 5:50] = True  # a region
    mask[10:20, 10:20] = False  # with a hole
    mask[12:15, 12:15] = True  # and an island in the hole: a region of its own
    mask[45:48, 52:58] = True  # a second region outside
    found = mask_formats.polygons(mask, 0.0)
    assert [len(p.holes) for p in found] == [1, 0, 0]  # largest first
    outer = found[0].outer
    assert outer.min(axis=0).tolist() == [5.5, 5.5] and outer.max(axis=0).tolist() == [49.5, 39.5]
    assert {tuple(v) for v in outer.tolist()} == {(5.5, 5.5), (49.5, 5.5), (49.5, 39.5), (5.5, 39.5)}
    hole = found[0].holes[0]  # through the selected pixels around the hole
    assert hole.min(axis=0).tolist() == [9.5, 9.5] and hole.max(axis=0).tolist() == [20.5, 20.5]
    assert mask_formats.polygons(np.zeros((4, 4), bool)) == []


def test_a_tolerance_simplifies_a_ragged_outline() -> None:
    yy, xx = np.mgrid[0:200, 0:200]
    disc = (xx - 100.0) ** 2 + (yy - 100.0) ** 2 < 80.0**2
    exact = mask_formats.polygons(disc, 0.0)[0].outer
    coarse = mask_formats.polygons(disc, 2.0)[0].outer
    assert len(coarse) < len(exact) / 3
    # every simplified vertex is a vertex of the outline, within the tolerance of the disc's edge
    radius = np.hypot(coarse[:, 0] - 100.5, coarse[:, 1] - 100.5)
    assert np.all(np.abs(radius - 80) < 2.5)
    with pytest.raises(ValueError, match="0 or more"):
        mask_formats.polygons(disc, -1.0)


def test_written_masks_read_back_in_the_sdk() -> None:
    mask = _masks()[3]
    output = answers.Output(frozenset({answers.PNG, answers.RLE, answers.POLYGONS}), 0.0)
    message = answers.written(mask, output, 1)
    read = mask_output(message)
    assert read.rle is not None and np.array_equal(read.rle.array(), mask)
    assert np.array_equal(coco.decode(read.rle.to_coco()), mask)
    assert read.area == int(mask.sum()) and read.box == mask_formats.box(mask)
    assert read.polygons and all(len(p.outer) >= 1 for p in read.polygons)
    from_counts = answers.written(
        None,
        output,
        1,
        counts=mask_formats.rle_counts(mask),
        size=mask.shape,
        extent=mask_formats.box(mask),
    )
    assert from_counts == message  # the generator's path (pixels made from its counts) writes the same
    png_only = mask_output(answers.written(mask, answers.Output(frozenset({answers.PNG})), 1))
    assert png_only.rle is None and np.array_equal(png_only.array(), mask)
