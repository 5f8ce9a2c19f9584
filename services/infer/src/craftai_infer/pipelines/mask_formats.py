"""A mask as apps that annotate or edit want it: COCO run-length encoding, polygons, its box and area.

All in picture pixels, for a boolean (H, W) mask at the picture's size:

* RLE (COCO, as pycocotools reads it): runs over the pixels in column-major order (down the first
  column, then the next), alternately unselected and selected, starting with the unselected run
  (0 when the first pixel is selected); `compressed` is pycocotools' string form of the same
  counts: each count, less the count two before it from the third on, written 5 bits at a time,
  least significant first, as the characters 48 + (5 bits | 32 when more follow), the last group
  carrying the sign in its high bit (a variant of LEB128).
* Polygons: one per 8-connected region, its outer contour and the contours of its holes (OpenCV's
  two-level contour hierarchy), vertices at the centres of the boundary pixels, i.e. pixel
  (i, j)'s vertex is (i + 0.5, j + 0.5), simplified with Douglas-Peucker to `tolerance` pixels
  (0 keeps every corner of the boundary). A region one pixel thin has a ring of one or two vertices.
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
DEFAULT_TOLERANCE = 1.0


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
    """The regions of a mask as polygons with holes, largest outer ring first."""
    if tolerance < 0 or not np.isfinite(tolerance):
        raise ValueError(f"the polygon tolerance is a distance in pixels, 0 or more; got {tolerance}")
    contours, hierarchy = cv2.findContours(mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    if hierarchy is None:
        return []
    links = hierarchy[0]  # per contour: next, previous, first child, parent

    def ring(index: int) -> F32:
        contour = contours[index]
        if tolerance > 0 and len(contour) > 2:
            contour = cv2.approxPolyDP(contour, float(tolerance), True)
        return (contour.reshape(-1, 2).astype(np.float32) + np.float32(0.5)).astype(np.float32)

    found = []
    for index, (_, _, first_child, parent) in enumerate(links):
        if parent != -1:
            continue
        holes = []
        child = int(first_child)
        while child != -1:
            holes.append(ring(child))
            child = int(links[child][0])
        found.append((cv2.contourArea(contours[index]), Polygon(ring(index), tuple(holes))))
    found.sort(key=lambda item: -item[0])
    return [p for _, p in found]
