"""A mask as apps that annotate or edit want it: COCO run-length encoding, polygons, its box and area.

All in picture pixels, for a boolean (H, W) mask at the picture's size:

* RLE (COCO, as pycocotools reads it): runs over the pixels in column-major order (down the first
  column, then the next), alternately unselected and selected, starting with the unselected run
  (0 when the first pixel is selected); `compressed` is pycocotools' string form of the same
  counts: each count, less the count two before it from the third on, written 5 bits at a time,
  least significant first, as the characters 48 + (5 bits | 32 when more follow), the last group
  carrying the sign in its high bit (a variant of LEB128).
* Polygons: one per 8-connected region, its outer ring and the rings of its holes, along the edges
  of its pixels: pixel (i, j) is the square from (i, j) to (i + 1, j + 1), the frame of prompts and
  boxes, and a ring's vertices are the pixel corners where the outline turns. A reader that counts
  a pixel in when its centre is inside (COCO's pycocotools, shapely, a canvas or SVG fill) gets
  exactly the mask back. `tolerance` > 0 simplifies the rings with Douglas-Peucker (the vertices
  kept are corners of the outline): fewer vertices, and pixels along the outline on the wrong side.
  A region touching itself only at a corner (two pixels diagonal) is one region whose ring passes
  that corner twice.
* Box: the pixels' extent (x0, y0) of the first pixel to (x1, y1) past the last, all 0 when empty.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

Bool = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
DEFAULT_TOLERANCE = 0.0
SQUARE = np.ones((3, 3), np.uint8)


def rle_counts(mask: Bool) -> I64:
    """COCO's uncompressed counts of a boolean (H, W) mask."""
    flat = np.asarray(mask, dtype=np.bool_).ravel(order="F")
    return counts_from_changes(np.flatnonzero(flat[1:] != flat[:-1]) + 1, bool(flat[0]), flat.size)


def counts_from_changes(changes: I64, first: bool, size: int) -> I64:
    """Counts from the positions where the value changes (column-major), the first pixel's value
    and the number of pixels: how the torch route turns its device-side changes into counts."""
    edges = np.concatenate([[0], np.asarray(changes, dtype=np.int64), [size]])
    counts = np.diff(edges)
    return np.concatenate([[0], counts]) if first else counts


def rle_string(counts: I64) -> bytes:
    """pycocotools' compressed form of uncompressed counts (what `mask.encode` answers as "counts"),
    every count at once: group k of each value is its bits 5k..5k+4."""
    values = np.asarray(counts, dtype=np.int64).copy()
    if values.size > 3:
        values[3:] -= np.asarray(counts, dtype=np.int64)[1:-2]
    groups: list[npt.NDArray[np.int64]] = []
    active: list[npt.NDArray[np.bool_]] = []
    alive = np.ones(values.size, dtype=np.bool_)
    while alive.any():
        group = values & 0x1F
        values = values >> 5  # arithmetic: a negative delta ends once only sign bits are left
        more = np.where(group & 0x10, values != -1, values != 0) & alive
        groups.append(48 + (group | (more.astype(np.int64) << 5)))
        active.append(alive)
        alive = more
    if not groups:
        return b""
    table = np.stack(groups, axis=1)  # [values, groups]: each value's characters in order
    return table[np.stack(active, axis=1)].astype(np.uint8).tobytes()


def rle_answer_bytes(counts: I64) -> int:
    """What a mask's RLE takes in an answer, without making it: each count as a varint
    (MaskRle.counts) and as rle_string's characters (MaskRle.compressed), from the bit lengths of
    the counts and of their differences (5 bits a character, the sign included)."""
    values = np.asarray(counts, dtype=np.int64)
    deltas = values.copy()
    if deltas.size > 3:
        deltas[3:] -= values[1:-2]
    magnitude = np.where(deltas >= 0, deltas, ~deltas)
    characters = (_bit_length(magnitude) + 1 + 4) // 5
    varints = np.maximum(1, (_bit_length(values) + 6) // 7)
    return int(characters.sum() + varints.sum())


def _bit_length(values: I64) -> npt.NDArray[np.int64]:
    """int.bit_length of each non-negative value (exact below 2**53)."""
    return np.frexp(values.astype(np.float64))[1].astype(np.int64)


def area(counts: I64) -> int:
    """Selected pixels: the odd runs."""
    return int(np.asarray(counts)[1::2].sum())


def box(mask: Bool) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1): the selected pixels' extent, x1 and y1 past the last; zeros when empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return (0, 0, 0, 0)
    cols = np.flatnonzero(mask.any(axis=0))
    return (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1)


@dataclass(frozen=True)
class Polygon:
    """An 8-connected region: its outer ring and its holes' rings, each (N, 2) x, y in picture pixels."""

    outer: F32
    holes: tuple[F32, ...]


def polygons(mask: Bool, tolerance: float = DEFAULT_TOLERANCE) -> list[Polygon]:
    """The regions of a mask as polygons with holes, largest outer ring first.

    The outline is traced on a grid of twice the resolution plus one, where cell (2j + 1, 2i + 1) is
    pixel (i, j), an even row or column an edge line and (2j, 2i) the corner (i, j), each selected
    pixel covering its 3 × 3 cells (its closed square): OpenCV's border following (outer borders of
    the 8-connected regions and the borders of their holes, two levels) then walks pixel edges.
    """
    if tolerance < 0 or not np.isfinite(tolerance):
        raise ValueError(f"the polygon tolerance is a distance in pixels, 0 or more; got {tolerance}")
    x0, y0, x1, y1 = box(mask)  # the outline is traced within the selected pixels' extent
    if x1 == 0:
        return []
    pixels = np.zeros((2 * (y1 - y0) + 1, 2 * (x1 - x0) + 1), np.uint8)
    pixels[1::2, 1::2] = mask[y0:y1, x0:x1]
    squares = np.asarray(cv2.dilate(pixels, SQUARE), dtype=np.uint8)
    del pixels
    contours, hierarchy = cv2.findContours(squares, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    if hierarchy is None:
        return []
    links = hierarchy[0]  # per contour: next, previous, first child, parent

    def ring(index: int) -> tuple[float, F32]:
        """The contour's ring in picture pixels, and the area it encloses."""
        corners = _corners(contours[index].reshape(-1, 2).astype(np.int64), squares)
        x, y = corners[:, 0], corners[:, 1]
        enclosed = abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 8  # shoelace, grid units²/4
        if tolerance > 0 and len(corners) > 4:
            simpler = cv2.approxPolyDP(corners.astype(np.int32).reshape(-1, 1, 2), 2 * tolerance, True)
            if len(simpler) >= 3:  # a ring of two vertices encloses nothing (and COCO reads 4 numbers as a box)
                corners = simpler.reshape(-1, 2).astype(np.int64)
        return enclosed, (corners / np.float32(2.0) + np.array([x0, y0], np.float32)).astype(np.float32)

    found = []
    for index, (_, _, first_child, parent) in enumerate(links):
        if parent != -1:
            continue
        holes = []
        child = int(first_child)
        while child != -1:
            holes.append(ring(child)[1])
            child = int(links[child][0])
        enclosed, outer = ring(index)
        found.append((enclosed, Polygon(outer, tuple(holes))))
    found.sort(key=lambda item: -item[0])
    return [p for _, p in found]


def _corners(cells: I64, squares: npt.NDArray[np.uint8]) -> I64:
    """A traced border (grid cells in order) as the corners where it turns (x, y on the grid). The
    border following steps diagonally across a concave corner, and through the corner two diagonal
    pixels share: each such step is first split at the corner it skipped (of its two candidates,
    the one the squares cover), so that every step runs along a pixel edge."""
    after = np.roll(cells, -1, axis=0)
    diagonal = np.all(np.abs(after - cells) == 1, axis=1)
    if diagonal.any():
        one = np.stack([cells[:, 0], after[:, 1]], axis=1)
        other = np.stack([after[:, 0], cells[:, 1]], axis=1)
        skipped = np.where((squares[one[:, 1], one[:, 0]] > 0)[:, None], one, other)
        place = np.arange(len(cells)) + np.concatenate([[0], np.cumsum(diagonal)[:-1]])
        walked = np.empty((len(cells) + int(diagonal.sum()), 2), np.int64)
        walked[place] = cells
        walked[place[diagonal] + 1] = skipped[diagonal]
        cells = walked
    turns = np.any(cells - np.roll(cells, 1, axis=0) != np.roll(cells, -1, axis=0) - cells, axis=1)
    corners: I64 = cells[turns]
    return corners
