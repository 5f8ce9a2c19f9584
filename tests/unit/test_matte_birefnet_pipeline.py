"""The BiRefNet pipeline with networks whose answer is known: sizes, squashing, the 8-bit input, the
filter both ways, refinement only from 2048 px on, batching, rounding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from craftai_infer.pipelines import matte_refine
from craftai_infer.pipelines.guided_filter import guided_filter
from craftai_infer.pipelines.matte_birefnet import (
    BirefnetSettings,
    matte_birefnet_batch,
    matte_birefnet_float,
    network_input,
)
from craftai_models import imagenet

SMALL = BirefnetSettings(size=64)


def matte_birefnet(rgb: np.ndarray, network: Any, settings: BirefnetSettings) -> np.ndarray:
    """One picture through the pipeline's batch function, its matte to the host."""
    (matte,) = matte_birefnet_batch([rgb], network, settings=settings)
    out: np.ndarray = matte.numpy()
    return out


class RedLogits:
    """logit = 8·(red − ½): the matte is (nearly) the red channel thresholded at ½, at the network's size."""

    def __init__(self) -> None:
        self.inputs: list[tuple[int, ...]] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.inputs.append(tuple(x.shape))
        red = x[:, :1] * imagenet.STD[0] + imagenet.MEAN[0]
        return 8.0 * (red - 0.5)


def disc_picture(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.full((h, w, 3), 30, np.uint8)
    rgb[(yy - h / 2) ** 2 + (xx - w / 2) ** 2 < (0.3 * min(h, w)) ** 2] = [230, 200, 180]
    return rgb


def test_the_network_sees_the_picture_squashed_to_its_square() -> None:
    network = RedLogits()
    for h, w in ((30, 200), (200, 30), (64, 64), (1, 1)):
        matte = matte_birefnet(disc_picture(h, w), network, settings=SMALL)
        assert matte.shape == (h, w) and matte.dtype == np.uint8
    assert set(network.inputs) == {(1, 3, 64, 64)}


def test_the_input_is_pillows_bilinear_in_8_bit_levels_and_imagenet_normalised() -> None:
    """The authors' transforms: Pillow's antialiased bilinear on the 8-bit picture (its two 8-bit
    passes, the width first), /255, ImageNet's mean and std: the same levels, bit for bit."""
    rgb = np.asarray(Image.fromarray(disc_picture(150, 100)).convert("RGB"))
    rgb = np.ascontiguousarray(np.clip(rgb.astype(int) + np.arange(100)[None, :, None] % 7 * 3, 0, 255), np.uint8)
    x = network_input(torch.from_numpy(rgb.copy()), BirefnetSettings(size=64))
    wide = Image.fromarray(rgb).resize((64, 150), Image.Resampling.BILINEAR)
    pillow = np.asarray(wide.resize((64, 64), Image.Resampling.BILINEAR), np.float32) / 255
    expected = (pillow - np.asarray(imagenet.MEAN, np.float32)) / np.asarray(imagenet.STD, np.float32)
    assert np.abs(x[0].permute(1, 2, 0).numpy() - expected).max() < 1e-6


def test_the_matte_is_the_sigmoid_brought_back_to_the_picture() -> None:
    rgb = disc_picture(90, 140)
    alpha = matte_birefnet_float(rgb, RedLogits(), settings=SMALL).numpy()
    small = torch.sigmoid(RedLogits()(network_input(torch.from_numpy(rgb), SMALL)))
    expected = F.interpolate(small, size=(90, 140), mode="bilinear", align_corners=False)[0, 0]
    assert np.allclose(alpha, expected.numpy(), atol=1e-6)
    assert alpha.min() < 0.05 and alpha.max() > 0.95  # a disc, no min-max normalisation needed
    matte = matte_birefnet(rgb, RedLogits(), settings=SMALL)
    assert np.array_equal(matte, np.floor(alpha * 255 + 0.5).astype(np.uint8))


def test_reduction_interpolates_the_two_nearest_samples_as_the_authors() -> None:
    """A picture smaller than the network: the matte is interpolated bilinearly between the two
    nearest samples (nobg's post-processing, no antialiasing), not averaged over the area each pixel
    covers: logits in stripes of period 4 (on where x % 4 is 1 or 2) reduced 4 times are sampled
    between columns 4i+1 and 4i+2, both on (an area average would give grey)."""

    def stripes(x: torch.Tensor) -> torch.Tensor:
        on = (torch.arange(64) % 4 == 1) | (torch.arange(64) % 4 == 2)
        return torch.where(on, 10.0, -10.0).expand(x.shape[0], 1, 64, 64)

    matte = matte_birefnet(disc_picture(16, 16), stripes, settings=SMALL)
    assert matte.min() >= 254


def test_refinement_from_2048_px_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []

    def spy(guide: torch.Tensor, p: torch.Tensor, r: int, eps: float) -> torch.Tensor:
        calls.append(tuple(p.shape))
        return guided_filter(guide, p, r, eps)

    monkeypatch.setattr(matte_refine, "guided_filter", spy)
    settings = BirefnetSettings(size=64, refine_from=512)  # the same rule at a smaller scale
    matte_birefnet(disc_picture(300, 511), RedLogits(), settings=settings)
    assert calls == []
    matte_birefnet(disc_picture(300, 512), RedLogits(), settings=settings)
    assert calls, "refinement expected from refine_from on"
    assert len(calls) < -(-300 // 256) * -(-512 // 256) + 1
    assert BirefnetSettings().refine_from == 2048 and BirefnetSettings().size == 1024


def test_a_batch_answers_what_single_calls_answer_as_tensors_on_the_device() -> None:
    pictures = [disc_picture(40, 70), disc_picture(64, 64), disc_picture(100, 20)]
    batch = matte_birefnet_batch(pictures, RedLogits(), settings=SMALL)
    for picture, matte in zip(pictures, batch, strict=True):
        assert isinstance(matte, torch.Tensor) and matte.dtype == torch.uint8 and matte.device.type == "cpu"
        (alone,) = matte_birefnet_batch([picture], RedLogits(), settings=SMALL)
        assert np.array_equal(matte.numpy(), alone.numpy())


def test_pictures_of_another_type_are_refused() -> None:
    with pytest.raises(ValueError, match="uint8 picture"):
        matte_birefnet(np.zeros((8, 8, 4), np.uint8), RedLogits(), settings=SMALL)
