"""BiRefNet_dynamic's pipeline (craftai_infer.pipelines.matte_birefnet_dynamic): the input size rule,
and the steps around the network against the authors' inference at the original resolution as
craftai_dev.birefnet_reference restates it (Pillow's default resize to sides floored to 32,
ToTensor, Normalize; sigmoid, bilinear with align_corners=True, mul(255).byte()).

The network here is a small fixed convolution whose logits are spread per picture (so that the matte
has a subject, a background and every level between, not one saturated value): both sides call the
same network, so equal mattes mean equal inputs and equal steps after it, byte for byte."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
import torch
from PIL import Image
from torch import nn

from craftai_dev.birefnet_reference import author_dynamic_matte
from craftai_dev.files import sample_photo
from craftai_infer.pipelines.matte_birefnet_dynamic import (
    MAX_SIDE,
    MIN_SIDE,
    input_size,
    matte_birefnet_dynamic,
    network_input,
)


class SpreadLogits(nn.Module):
    """Logits of a seeded 5x5 convolution, standardised over the picture and scaled: a matte with
    every level, whatever the picture."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.conv = nn.Conv2d(3, 1, 5, padding=2, bias=False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.conv(x)
        spread: torch.Tensor = 3.0 * (y - y.mean()) / y.std()
        return spread


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((300, 451), (288, 448)),  # inside the trained sides: each floored to 32, as the authors'
        ((512, 512), (512, 512)),  # already multiples of 32: unchanged
        ((1536, 2048), (1536, 2048)),
        ((2304, 2304), (2304, 2304)),
        ((3000, 4000), (1728, 2304)),  # larger: the long side brought to 2304, the aspect kept
        ((4000, 3000), (2304, 1728)),
        ((100, 120), (256, 256)),  # smaller: each side raised to 256
        ((100, 5000), (256, 2304)),  # both limits: the short side raised after the reduction
        ((1, 1), (256, 256)),
    ],
)
def test_the_input_size_rule(size: tuple[int, int], expected: tuple[int, int]) -> None:
    height, width = input_size(*size)
    assert (height, width) == expected
    assert height % 32 == width % 32 == 0 and min(height, width) >= MIN_SIDE and max(height, width) <= MAX_SIDE


def test_a_picture_without_pixels_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match="no pixels"):
        input_size(0, 10)


def _photo(name: str, crop: tuple[int, int] | None = None) -> npt.NDArray[np.uint8]:
    picture = np.asarray(Image.open(sample_photo(name)).convert("RGB"))
    return picture if crop is None else np.ascontiguousarray(picture[: crop[0], : crop[1]])


@pytest.mark.parametrize(
    ("photo", "crop"),
    [("chelsea.png", None), ("astronaut.png", None), ("coffee.png", (397, 555))],
)
def test_the_steps_are_the_authors_byte_for_byte(photo: str, crop: tuple[int, int] | None) -> None:
    picture = _photo(photo, crop)
    network = SpreadLogits().eval()
    ours = matte_birefnet_dynamic(picture, network).numpy()
    theirs = author_dynamic_matte(picture, network)
    assert ours.shape == theirs.shape == picture.shape[:2]
    assert len(np.unique(theirs)) >= 200 and 0.2 < float((theirs > 127).mean()) < 0.8
    np.testing.assert_array_equal(ours, theirs)


def test_transparency_is_dropped_as_the_authors_reader_drops_it() -> None:
    picture = _photo("chelsea.png")
    alpha = np.zeros((*picture.shape[:2], 1), np.uint8)
    alpha[50:200, 100:300] = 255
    rgba = np.concatenate([picture, alpha], axis=2)
    torch.testing.assert_close(network_input(rgba), network_input(picture), rtol=0, atol=0)
