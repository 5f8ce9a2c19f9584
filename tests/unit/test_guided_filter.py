"""Colour guided filter against hand-computed small cases and an independent per-pixel solve."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from craftai_infer.pipelines.guided_filter import box_mean, guided_filter


def red_only(values: list[float]) -> torch.Tensor:
    """A 1×N colour guide whose red channel is `values` (green and blue 0), float64."""
    guide = torch.zeros(1, 3, 1, len(values), dtype=torch.float64)
    guide[0, 0, 0] = torch.tensor(values, dtype=torch.float64)
    return guide


def row(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).reshape(1, 1, 1, -1)


def test_box_mean_clips_windows_at_the_border() -> None:
    x = row([1.0, 2.0, 3.0, 4.0])
    # r=1: (1+2)/2, (1+2+3)/3, (2+3+4)/3, (3+4)/2
    assert box_mean(x, 1).flatten().tolist() == pytest.approx([1.5, 2.0, 3.0, 3.5])
    grid = torch.arange(9, dtype=torch.float64).reshape(1, 1, 3, 3)
    # corner (0,0), r=1: mean of 0,1,3,4
    assert float(box_mean(grid, 1)[0, 0, 0, 0]) == pytest.approx(2.0)
    assert float(box_mean(grid, 1)[0, 0, 1, 1]) == pytest.approx(4.0)


def test_two_pixels_by_hand() -> None:
    """Both windows hold both pixels: μ=0.5, var=0.25, p̄=0.5, cov=0.25; ε=0.25 -> a=0.5, b=0.25."""
    q = guided_filter(red_only([0.0, 1.0]), row([0.0, 1.0]), r=1, eps=0.25)
    assert q.flatten().tolist() == pytest.approx([0.25, 0.75])


def test_three_pixels_by_hand_with_clipped_windows() -> None:
    """I_red = p = [0, 0, 1], r=1, ε=2/9.

    window 0 = {0,1}: a=0, b=0;  window 1 = {0,1,2}: var=cov=2/9 -> a=1/2, b=1/6;
    window 2 = {1,2}: var=cov=1/4 -> a=9/17, b=4/17.
    q0 = (0+1/6)/2 = 1/12;  q1 = (0+1/6+4/17)/3 = 41/306;  q2 = (1/2+9/17)/2 + (1/6+4/17)/2 = 73/102.
    """
    q = guided_filter(red_only([0.0, 0.0, 1.0]), row([0.0, 0.0, 1.0]), r=1, eps=2 / 9)
    assert q.flatten().tolist() == pytest.approx([1 / 12, 41 / 306, 73 / 102])


def test_constant_input_is_kept() -> None:
    guide = torch.rand(1, 3, 9, 7, generator=torch.Generator().manual_seed(0))
    p = torch.full((1, 1, 9, 7), 0.3)
    assert torch.allclose(guided_filter(guide, p, 2, 1e-4), p, atol=1e-6)


def test_a_linear_function_of_the_guide_is_reproduced() -> None:
    """With a small ε the local linear model is exact: q = p when p = cᵀI + d."""
    guide = torch.rand(1, 3, 12, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    c = torch.tensor([0.5, -0.25, 0.75], dtype=torch.float64).view(1, 3, 1, 1)
    p = (guide * c).sum(dim=1, keepdim=True) + 0.1
    assert torch.allclose(guided_filter(guide, p, 2, 1e-10), p, atol=1e-6)


def naive(guide: np.ndarray, p: np.ndarray, r: int, eps: float) -> np.ndarray:
    """He's formulas pixel by pixel with clipped windows and a 3×3 solve (independent of the code)."""
    _, h, w = guide.shape
    a = np.zeros((3, h, w))
    b = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            ys, xs = slice(max(y - r, 0), y + r + 1), slice(max(x - r, 0), x + r + 1)
            window = guide[:, ys, xs].reshape(3, -1)
            pw = p[ys, xs].reshape(-1)
            mu = window.mean(axis=1)
            sigma = (window @ window.T) / window.shape[1] - np.outer(mu, mu)
            cov = (window @ pw) / window.shape[1] - mu * pw.mean()
            a[:, y, x] = np.linalg.solve(sigma + eps * np.eye(3), cov)
            b[y, x] = pw.mean() - a[:, y, x] @ mu
    q = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            ys, xs = slice(max(y - r, 0), y + r + 1), slice(max(x - r, 0), x + r + 1)
            q[y, x] = a[:, ys, xs].mean(axis=(1, 2)) @ guide[:, y, x] + b[ys, xs].mean()
    return q


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_a_per_pixel_solve(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(2)
    guide = rng.random((3, 7, 9))
    p = (rng.random((7, 9)) > 0.5).astype(np.float64)
    expected = naive(guide, p, r=2, eps=1e-3)
    got = guided_filter(torch.from_numpy(guide)[None].to(dtype), torch.from_numpy(p)[None, None].to(dtype), 2, 1e-3)
    assert np.allclose(got[0, 0].double().numpy(), expected, atol=1e-9 if dtype == torch.float64 else 2e-4)


def test_refuses_bad_shapes_and_eps() -> None:
    with pytest.raises(ValueError, match="expected guide"):
        guided_filter(torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4), 1, 1e-4)
    with pytest.raises(ValueError, match="eps"):
        guided_filter(torch.zeros(1, 3, 4, 4), torch.zeros(1, 1, 4, 4), 1, 0.0)
