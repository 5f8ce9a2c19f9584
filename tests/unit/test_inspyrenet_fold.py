"""Folding BatchNorm into the convs (GPU route) computes the same network up to float rounding."""

from __future__ import annotations

import torch

from craftai_dev.inspyrenet_reference import randomised_state_dict
from craftai_models.inspyrenet import ConvBn, fold_batchnorm, inspyrenet_swin_b


def test_folded_network_equals_the_loaded_one() -> None:
    net = inspyrenet_swin_b((64, 64)).eval()
    net.load_state_dict(randomised_state_dict(net, seed=3))
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        before = net.stages(x).saliency[-1]
    fold_batchnorm(net)
    assert not any(m.bn is not None for m in net.modules() if isinstance(m, ConvBn))
    with torch.inference_mode():
        after = net.stages(x).saliency[-1]
    assert float((after - before).abs().max() / before.abs().max()) < 2e-5
