"""Mask formats (craftai_infer.pipelines.mask_formats, craftai_infer.masks) against COCO's own
reader and writer (pycocotools, test-only), and the SDK's readers of them (craftai.outputs).

Polygons are read back as COCO reads them (`frPyObjects` + `decode` of each ring; a region is its
outer ring less its holes): at the default (every corner) that gives exactly the mask, on shapes of
every kind (hypothesis): specks, noise full of pixels touching at a corner, strokes one pixel thin
in every direction, rings, nested regions, a full mask.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt
import pycocotools.mask as coco  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from craftai.outputs import mask_output
from craftai_infer import masks as answers
from craftai_infer.pipelines import mask_formats
from craftai_wire.v1 import infer_pb2

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


@pytest.mark.parametrize("index", range(7))
def test_the_rle_answer_size_is_known_before_the_answer_is_made(index: int) -> None:
    """What segment everything counts against the answer's limit as masks come: the varints of
    MaskRle.counts and the characters of MaskRle.compressed, exactly."""
    mask = _masks()[index]
    h, w = mask.shape
    counts = mask_formats.rle_counts(mask)
    message = answers.rle_message(counts, h, w)
    packed = message.ByteSize() - infer_pb2.MaskRle(height=h, width=w).ByteSize()
    varints = sum(len(_varint(int(c))) for c in counts)
    assert mask_formats.rle_answer_bytes(counts) == varints + len(mask_formats.rle_string(counts))
    assert 0 <= packed - mask_formats.rle_answer_bytes(counts) <= 12  # the two fields' tags and lengths


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


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
    outer = found[0].outer  # along the pixels' edges: pixel (i, j) is the square (i, j) to (i + 1, j + 1)
    assert outer.min(axis=0).tolist() == [5, 5] and outer.max(axis=0).tolist() == [50, 40]
    assert {tuple(v) for v in outer.tolist()} == {(5, 5), (50, 5), (50, 40), (5, 40)} and len(outer) == 4
    hole = found[0].holes[0]  # along the edges of the hole's pixels
    assert {tuple(v) for v in hole.tolist()} == {(10, 10), (20, 10), (20, 20), (10, 20)} and len(hole) == 4
    assert {tuple(v) for v in found[1].outer.tolist()} == {(52, 45), (58, 45), (58, 48), (52, 48)}
    assert {tuple(v) for v in found[2].outer.tolist()} == {(12, 12), (15, 12), (15, 15), (12, 15)}
    assert mask_formats.polygons(np.zeros((4, 4), bool)) == []


def test_a_single_pixel_and_pixels_touching_at_a_corner() -> None:
    one = np.zeros((3, 4), bool)
    one[1, 2] = True
    (square,) = mask_formats.polygons(one)
    assert {tuple(v) for v in square.outer.tolist()} == {(2, 1), (3, 1), (3, 2), (2, 2)}
    diagonal = np.eye(3, dtype=bool)  # one 8-connected region: its ring passes (1, 1) and (2, 2) twice
    (stair,) = mask_formats.polygons(diagonal)
    assert len(stair.outer) == 12 and _area(stair.outer) == 3
    assert np.array_equal(_coco_reads([stair], *diagonal.shape), diagonal)


def test_a_tolerance_simplifies_a_ragged_outline() -> None:
    yy, xx = np.mgrid[0:200, 0:200]
    disc = (xx - 100.0) ** 2 + (yy - 100.0) ** 2 < 80.0**2
    exact = mask_formats.polygons(disc, 0.0)[0].outer
    coarse = mask_formats.polygons(disc, 2.0)[0].outer
    assert len(coarse) < len(exact) / 3
    # every simplified vertex is a vertex of the outline, within the tolerance of the disc's edge
    radius = np.hypot(coarse[:, 0] - 100.5, coarse[:, 1] - 100.5)
    assert np.all(np.abs(radius - 80) < 2.5)
    assert {tuple(v) for v in coarse.tolist()} <= {tuple(v) for v in exact.tolist()}
    assert np.array_equal(_coco_reads(mask_formats.polygons(disc), 200, 200), disc)
    with pytest.raises(ValueError, match="0 or more"):
        mask_formats.polygons(disc, -1.0)


def _area(ring: npt.NDArray[np.float32]) -> float:
    x, y = ring[:, 0].astype(np.float64), ring[:, 1].astype(np.float64)
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


def _coco_reads(polygons: list[mask_formats.Polygon], h: int, w: int) -> npt.NDArray[np.bool_]:
    """The pixels COCO's reader gives for the polygons: each region its outer ring less its holes."""

    def ring(vertices: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
        rle = coco.frPyObjects([vertices.astype(np.float64).ravel().tolist()], h, w)
        return np.asarray(coco.decode(coco.merge(rle)), dtype=bool)

    found = np.zeros((h, w), bool)
    for polygon in polygons:
        region = ring(polygon.outer)
        for hole in polygon.holes:
            region &= ~ring(hole)
        found |= region
    return found


@st.composite
def _shapes(draw: st.DrawFn) -> npt.NDArray[np.bool_]:
    """A mask of one kind: noise (pixels touching at corners everywhere), blobs, strokes one pixel
    thin at any angle, circles one pixel thin (rings with a hole), rectangles nested in holes."""
    h, w = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["noise", "blobs", "strokes", "rings", "nested", "full"]))
    canvas = np.zeros((h, w), np.uint8)
    if kind == "noise":
        canvas[:] = rng.random((h, w)) < rng.uniform(0.1, 0.9)
    elif kind == "blobs":
        canvas[:] = rng.random((h, w)) < 0.05
        canvas[:] = cv2.dilate(canvas, np.ones((3, 3), np.uint8), iterations=int(rng.integers(1, 4)))
    elif kind == "strokes":
        for _ in range(int(rng.integers(1, 5))):
            a, b = rng.integers(0, (w, h), 2), rng.integers(0, (w, h), 2)
            cv2.line(canvas, tuple(int(v) for v in a), tuple(int(v) for v in b), 1, 1, cv2.LINE_8)
    elif kind == "rings":
        for _ in range(int(rng.integers(1, 4))):
            centre = tuple(int(v) for v in rng.integers(0, (w, h), 2))
            cv2.circle(canvas, centre, int(rng.integers(1, 20)), 1, 1, cv2.LINE_8)
    elif kind == "nested":
        for step in range(0, min(h, w) // 2, 2):
            canvas[step : h - step, step : w - step] = 1 - step // 2 % 2
    else:
        canvas[:] = 1
    return canvas.astype(bool)


@given(_shapes())
@settings(max_examples=300, deadline=None)
def test_coco_reads_every_polygon_back_as_exactly_the_mask(mask: npt.NDArray[np.bool_]) -> None:
    found = mask_formats.polygons(mask)
    assert np.array_equal(_coco_reads(found, *mask.shape), mask)
    regions = cv2.connectedComponents(mask.astype(np.uint8), connectivity=8)[0] - 1
    assert len(found) == regions
    enclosed = sum(_area(p.outer) - sum(_area(h) for h in p.holes) for p in found)
    assert enclosed == mask.sum()  # the rings enclose the pixels' squares exactly
    if found:  # and the region's rings lie within its box, the frame of prompts
        x0, y0, x1, y1 = mask_formats.box(mask)
        corners = np.concatenate([p.outer for p in found])
        assert corners.min(axis=0).tolist() == [x0, y0] and corners.max(axis=0).tolist() == [x1, y1]


def test_written_masks_read_back_in_the_sdk() -> None:
    mask = _masks()[3]
    output = answers.Output(frozenset({answers.PNG, answers.RLE, answers.POLYGONS}), 0.0)
    message = answers.written(mask, output, 1)
    read = mask_output(message)
    assert read.rle is not None and np.array_equal(read.rle.array(), mask)
    assert np.array_equal(coco.decode(read.rle.to_coco()), mask)
    assert read.area == int(mask.sum()) and read.box == mask_formats.box(mask)
    assert read.polygons and all(len(p.outer) >= 4 for p in read.polygons)
    polygons = [mask_formats.Polygon(outer, tuple(holes)) for outer, holes in (p.arrays() for p in read.polygons)]
    assert np.array_equal(_coco_reads(polygons, *mask.shape), mask)  # the SDK's rings, as COCO reads them
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
