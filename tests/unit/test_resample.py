"""Device-side Lanczos-3 and reflect padding: Pillow's coefficients, numpy's reflection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_dev.files import sample_photo
from craftai_infer.pipelines.resample import lanczos_matrix, reflect_indices, reflect_pad, resize_lanczos


def test_rows_sum_to_one_and_shrinking_spreads_the_filter() -> None:
    matrix = lanczos_matrix(4000, 1280)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-6)
    taps = (matrix[640] != 0).sum()
    assert 18 <= taps <= 20  # support 3 * 4000/1280 on each side


def test_shrinking_a_photo_matches_pillow_within_its_8_bit_rounding() -> None:
    picture = np.asarray(Image.open(sample_photo("astronaut.png")).convert("RGB"))
    for height, width in ((160, 160), (300, 211)):
        reference = np.asarray(Image.fromarray(picture).resize((width, height), Image.Resampling.LANCZOS))
        x = torch.from_numpy(picture).permute(2, 0, 1)[None].float()
        ours = resize_lanczos(x, height, width)[0].permute(1, 2, 0).clamp(0, 255).round().numpy()
        difference = np.abs(ours - reference)
        # Pillow rounds and clips to 8 bits between its two passes: at hard edges where the
        # Lanczos lobes over- or undershoot, a few pixels differ by more than rounding.
        assert difference.mean() < 0.2, (height, width, difference.mean())
        assert np.percentile(difference, 99.5) <= 1 and difference.max() <= 12, (height, width, difference.max())


def test_same_size_is_the_identity() -> None:
    x = torch.rand(1, 3, 17, 31)
    torch.testing.assert_close(resize_lanczos(x, 17, 31), x)


@pytest.mark.parametrize(("size", "target"), [(5, 12), (1, 4), (3, 3), (2, 7), (31, 64)])
def test_reflection_is_numpys(size: int, target: int) -> None:
    np.testing.assert_array_equal(reflect_indices(size, target), np.pad(np.arange(size), (0, target - size), "reflect"))


def test_reflect_pad_both_axes() -> None:
    x = torch.arange(6.0).reshape(1, 1, 2, 3)
    expected = np.pad(x.numpy(), ((0, 0), (0, 0), (0, 3), (0, 1)), "reflect")
    np.testing.assert_array_equal(reflect_pad(x, 5, 4).numpy(), expected)
