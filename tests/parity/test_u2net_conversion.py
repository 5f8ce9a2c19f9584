"""U²-Net at the full widths (u2net, u2net_human_seg): the conversion of a published graph into this
project's network agrees with the authors' network (random weights, its BatchNorms not folded,
exported here) within 1e-4, and with onnxruntime on the published u2net.onnx on the sample photos
within the prepare step's own tolerances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from craftai_dev import u2net_fixture
from craftai_dev.files import u2net_onnx
from craftai_dev.samples import PHOTOS
from craftai_dev.u2net_reference import u2net_class
from craftai_models.u2netp import OUTPUT_NAMES
from craftai_prepare.converters import u2netp as converter

pytestmark = pytest.mark.slow


def test_the_authors_network_converted_agrees_within_1e_4(tmp_path: Path) -> None:
    torch.manual_seed(1)
    reference = u2net_class()().eval()
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():  # BatchNorms that are not the identity, so that folding them is checked
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                channels = module.num_features
                module.weight.copy_(0.5 + torch.rand(channels, generator=generator))
                module.bias.copy_(0.2 * torch.randn(channels, generator=generator))
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.copy_(0.2 * torch.randn(channels, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(channels, generator=generator))
    path = tmp_path / "u2net.onnx"
    torch.onnx.export(
        reference,
        (torch.zeros(1, 3, 320, 320),),
        str(path),
        dynamo=False,
        opset_version=11,
        input_names=["input.1"],
        dynamic_axes={"input.1": {2: "height", 3: "width"}},
    )
    state = converter.convert(onnx.load(str(path)), converter.U2NET)
    x = u2net_fixture.photo_batch(list(PHOTOS[:2])).numpy()
    ours = converter.run_converted(state, x, converter.U2NET)
    with torch.inference_mode():
        theirs = [t.numpy() for t in reference(torch.from_numpy(x))]
    for name, a, b in zip(OUTPUT_NAMES, ours, theirs, strict=True):
        assert float(np.abs(a - b).max()) <= 1e-4, name
        assert float(b.std()) > 1e-3, name  # not a constant map


def test_the_published_u2net_converted_agrees_with_onnxruntime_on_the_photos() -> None:
    model = onnx.load(str(u2net_onnx()))
    state = converter.convert(model, converter.U2NET)
    found = converter.compare(model, state, u2net_fixture.photo_batch(list(PHOTOS)).numpy(), network=converter.U2NET)
    converter.check(found, converter.U2NET)
    assert found[0].max_abs > 0  # two engines: equal to the last bit would mean one ran twice
