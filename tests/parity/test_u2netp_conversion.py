"""u2netp: the converted torch network against the published graph run by onnxruntime (both fp32,
CPU), on the fixed probe and on real photos prepared the way rembg prepares them."""

from __future__ import annotations

import copy

import numpy as np
import numpy.typing as npt
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from PIL import Image

from craftai_dev.files import sample_photo
from craftai_dev.samples import PHOTOS as SAMPLE_PHOTOS
from craftai_models.u2netp import INPUT_SIZE
from craftai_prepare.converters import u2netp as converter

MIN_MASK_IOU = 0.999


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rembg_picture(name: str) -> converter.Array:
    """rembg's u2netp input: RGB, resized to 320 x 320 with LANCZOS, / its max, ImageNet mean/std."""
    with Image.open(sample_photo(name)) as img:
        rgb = img.convert("RGB").resize((INPUT_SIZE, INPUT_SIZE), Image.Resampling.LANCZOS)
    return converter.rembg_input(np.asarray(rgb))


def iou(a: npt.NDArray[np.bool_], b: npt.NDArray[np.bool_]) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def test_probe_agrees_within_the_tolerance(
    u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor]
) -> None:
    """What the prepare step checks before publishing: all seven maps, on the probe."""
    found = converter.compare(u2netp_published, u2netp_converted)
    converter.check(found)
    assert [d.name for d in found] == ["fused", "side_1", "side_2", "side_3", "side_4", "side_5", "side_6"]


@pytest.mark.slow
@pytest.mark.parametrize("photo", SAMPLE_PHOTOS)
def test_photos_agree(u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor], photo: str) -> None:
    x = rembg_picture(photo)
    ours = converter.run_converted(u2netp_converted, x)
    reference = converter.run_reference(u2netp_published, x)
    fused = converter.differences(ours, reference)[0]
    assert fused.max_abs <= converter.FUSED_MAX_ABS_TOLERANCE, fused
    assert iou(ours[0] > 0.5, reference[0] > 0.5) >= MIN_MASK_IOU
    # Not a blank map: the photo has a subject and the comparison means something.
    assert 0.01 < float((reference[0] > 0.5).mean()) < 0.99


def _unfold_one_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """The published graph with En_1's input conv split into Conv (no bias) + BatchNormalization,
    with non-trivial statistics, as an exporter that does not fold BN would leave it."""
    edited = copy.deepcopy(model)
    (conv,) = (n for n in edited.graph.node if n.name == "Conv_0")
    channels = 64
    k = np.arange(channels, dtype=np.float64)
    scale, shift = 0.5 + 0.02 * k, 0.1 * np.sin(k)
    mean, var = 0.05 * np.cos(k), 0.2 + 0.01 * k
    bias = numpy_helper.to_array(next(t for t in edited.graph.initializer if t.name == conv.input[2]))
    stored = {"bn_scale": scale, "bn_shift": shift, "bn_mean": mean - bias, "bn_var": var}
    edited.graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in stored.items())
    del conv.input[2]
    relu_input = conv.output[0]
    conv.output[0] = "conv0_raw"
    bn = helper.make_node("BatchNormalization", ["conv0_raw", *stored], [relu_input], name="BN_0", epsilon=1e-5)
    edited.graph.node.insert(1, bn)
    return edited


def test_a_graph_with_batchnorm_is_folded_and_agrees(
    u2netp_published: onnx.ModelProto, u2netp_converted: dict[str, torch.Tensor]
) -> None:
    edited = _unfold_one_batchnorm(u2netp_published)
    state = converter.convert(edited)
    assert not torch.equal(state["en_1.conv_in.conv.weight"], u2netp_converted["en_1.conv_in.conv.weight"])
    converter.check(converter.compare(edited, state))
