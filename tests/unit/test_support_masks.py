"""The tests' mask comparison: the all-pairs IoU matrix equals the one-pair IoU, empty masks included."""

from __future__ import annotations

import numpy as np

from craftai_dev.masks import iou, iou_matrix


def test_iou_matrix_equals_each_pair() -> None:
    rng = np.random.default_rng(7)
    rows = [rng.random((37, 51)) < p for p in (0.0, 0.1, 0.5, 0.9)]
    columns = [*rows[1:], rng.random((37, 51)) < 0.3, np.zeros((37, 51), bool)]
    matrix = iou_matrix(rows, columns)
    assert matrix.shape == (4, 5)
    for i, a in enumerate(rows):
        for j, b in enumerate(columns):
            assert matrix[i, j] == iou(a, b), (i, j)
    assert matrix[1, 0] == 1.0 and matrix[0, 4] == 1.0 and iou_matrix([], columns).shape == (0, 5)
