"""The 0.2 fringe shrink: α' = clip((α − 0.2) / 0.8, 0, 1) (docs/MATTE.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from craftai_infer.pipelines.matte_inspyrenet import MatteSettings, fringe_shrink, matte_inspyrenet


def test_hand_values() -> None:
    alpha = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.6, 0.9, 1.0])
    # (0.3-0.2)/0.8 = 0.125; (0.6-0.2)/0.8 = 0.5; (0.9-0.2)/0.8 = 0.875
    expected = [0.0, 0.0, 0.0, 0.125, 0.5, 0.875, 1.0]
    assert fringe_shrink(alpha).tolist() == pytest.approx(expected)


def test_monotone_continuous_and_keeps_the_ends() -> None:
    alpha = torch.linspace(0, 1, 1001, dtype=torch.float64)
    shrunk = fringe_shrink(alpha)
    assert torch.all(shrunk[1:] >= shrunk[:-1])
    assert float((shrunk[1:] - shrunk[:-1]).max()) <= 0.001 / 0.8 + 1e-12  # slope 1/0.8, no jump
    assert float(shrunk[0]) == 0.0 and float(shrunk[-1]) == 1.0
    assert torch.all(shrunk[alpha <= 0.2] == 0)
    assert torch.all(shrunk <= alpha + 1e-12)  # never more opaque: it only shrinks


def test_other_black_points_and_refusal() -> None:
    assert fringe_shrink(torch.tensor([0.5]), 0.0).item() == 0.5
    assert fringe_shrink(torch.tensor([0.75]), 0.5).item() == 0.5
    with pytest.raises(ValueError):
        fringe_shrink(torch.tensor([0.5]), 1.0)


def test_the_pipeline_applies_it_before_rounding() -> None:
    """A stand-in network answering a constant 0.6 gives round(255 · 0.5) = 128 everywhere."""

    def constant(x: torch.Tensor) -> torch.Tensor:
        return torch.full((x.shape[0], 1, *x.shape[-2:]), 0.6)

    rgb = np.zeros((5, 7, 3), np.uint8)
    assert np.all(matte_inspyrenet(rgb, constant) == 128)
    assert np.all(matte_inspyrenet(rgb, constant, settings=MatteSettings(fringe=0.0)) == 153)
