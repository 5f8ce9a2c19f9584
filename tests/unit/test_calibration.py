"""The random-weight calibration helpers (craftai_dev.calibration) do what the fixtures rely on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from craftai_dev import calibration
from craftai_dev.calibration import calibrate_batchnorm, fit_readout, readout_input


def test_batchnorm_calibration_brings_every_layer_to_unit_scale() -> None:
    torch.manual_seed(0)
    convs = [nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)]
    norms = [nn.BatchNorm2d(8), nn.BatchNorm2d(8)]
    net = nn.Sequential(convs[0], norms[0], convs[1], norms[1])
    with torch.no_grad():
        for conv in convs:
            conv.weight.mul_(50.0)  # activations that grow layer after layer
    x = torch.randn(1, 3, 24, 24) * 7 + 3
    state = calibrate_batchnorm(net, lambda: net(x))
    assert not net.training and set(state) == set(net.state_dict())
    with torch.no_grad():
        first, out = norms[0](convs[0](x)), net(x)
    for t in (first, out):
        assert t.mean(dim=(0, 2, 3)).abs().max() < 1e-3  # BatchNorm's own bias is 0 here
        assert (t.std(dim=(0, 2, 3)) - 1).abs().max() < 0.05


def test_a_readout_fitted_to_what_it_can_express_reproduces_it() -> None:
    torch.manual_seed(1)
    features = torch.randn(1, 6, 20, 20)
    truth = nn.Conv2d(6, 1, 3, padding=1, bias=False)
    target = truth(features).detach()
    readout = nn.Conv2d(6, 1, 3, padding=1, bias=False)
    r2 = fit_readout(readout, features, target, ridge=1e-8)
    assert r2 > 0.9999
    assert torch.allclose(readout.weight, truth.weight, atol=1e-3)


def test_the_readout_input_is_what_the_readout_sees() -> None:
    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU(), nn.Conv2d(4, 1, 1))
    x = torch.randn(1, 3, 5, 5)
    seen = readout_input(net, net[2], lambda: net(x))
    assert torch.equal(seen, torch.relu(net[0](x)).detach())


def test_a_readout_fitted_on_a_seeded_sample_of_positions_reproduces_it_and_is_repeatable() -> None:
    """The fixtures fit large readouts on `rows` positions drawn by a seed: the weights are still
    found, the same seed gives the same weights, and the positions do come from the sample (another
    seed, another fit where the target is noisy)."""
    torch.manual_seed(2)
    features = torch.randn(1, 6, 40, 40)
    truth = nn.Conv2d(6, 2, 3, padding=1)
    target = truth(features).detach()

    def fitted(seed: int, noise: torch.Tensor) -> nn.Conv2d:
        readout = nn.Conv2d(6, 2, 3, padding=1)
        assert fit_readout(readout, features, target + noise, ridge=1e-8, rows=300, seed=seed) > 0.95
        return readout

    exact = fitted(0, torch.zeros_like(target))
    assert exact.bias is not None and truth.bias is not None
    assert torch.allclose(exact.weight, truth.weight, atol=1e-3) and torch.allclose(exact.bias, truth.bias, atol=1e-3)
    noise = 0.1 * torch.randn_like(target)
    first, again, other = fitted(0, noise), fitted(0, noise), fitted(1, noise)
    assert torch.equal(first.weight, again.weight) and not torch.equal(first.weight, other.weight)


@pytest.mark.parametrize(
    ("kernel", "stride", "dilation", "padding"), [(3, 1, 1, 1), (1, 1, 1, 0), (3, 2, 1, 1), (3, 1, 2, 2)]
)
def test_the_patches_of_the_sampled_positions_are_unfolds_columns(
    kernel: int, stride: int, dilation: int, padding: int
) -> None:
    """A fit on `rows` positions gathers their patches alone: the very values F.unfold gives there."""
    conv = nn.Conv2d(5, 2, kernel, stride=stride, dilation=dilation, padding=padding)
    features = torch.randn(1, 5, 17, 23)
    every = F.unfold(features, kernel, dilation=dilation, padding=padding, stride=stride)
    width = (23 + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    at = torch.randperm(every.shape[-1], generator=torch.Generator().manual_seed(3))[:37].sort().values
    assert torch.equal(calibration._patches_at(conv, features, (padding, padding), at, width), every[..., at])
