"""The SDK's raw outputs (craftai.outputs): a raw output says its own shape (the rows from its
length, so a recipe's stacked parts read as they come), `array()` gives the same pixels raw or
decoded, and the format's name, suffix and media type are the vocabulary's."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from craftai import calls
from craftai.outputs import EncodedImage, matte_output
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import ImageFormat

RNG = np.random.default_rng(3)


def _result(width: int, height: int, **images: infer_pb2.MatteImage) -> infer_pb2.MatteResult:
    result = infer_pb2.MatteResult(width=width, height=height)
    for name, image in images.items():
        getattr(result, name).CopyFrom(image)
    return result


def test_each_outputs_raw_layout_comes_from_the_answer() -> None:
    cutout = RNG.integers(0, 256, (3, 5, 4), dtype=np.uint8)
    opaque = RNG.integers(0, 256, (3, 5, 3), dtype=np.uint8)
    raw = infer_pb2.MATTE_FORMAT_RAW
    result = _result(
        5,
        3,
        matte=infer_pb2.MatteImage(data=bytes(15), format=raw),
        mask=infer_pb2.MatteImage(data=b"\xff" * 15, format=raw),
        cutout=infer_pb2.MatteImage(data=cutout.tobytes(), format=raw, has_alpha=True),
        composite=infer_pb2.MatteImage(data=opaque.tobytes(), format=raw),
    )
    output = matte_output(result, [], "")
    assert output.matte is not None and output.mask is not None
    assert output.cutout is not None and output.composite is not None
    assert (output.matte.shape, output.mask.shape) == ((3, 5), (3, 5))
    assert (output.cutout.shape, output.composite.shape) == ((3, 5, 4), (3, 5, 3))
    assert np.array_equal(output.cutout.array(), cutout) and np.array_equal(output.composite.array(), opaque)
    assert not output.cutout.array().flags.writeable  # a view of the bytes, not a copy
    assert output.cutout.suffix == ".raw" and output.cutout.media_type == "application/octet-stream"


def test_stacked_parts_are_as_many_rows_as_the_bytes_hold() -> None:
    """A recipe's parts asked without a part come stacked: the rows are len(data) / (width * bytes)."""
    parts = RNG.integers(0, 256, (3 * 4, 6), dtype=np.uint8)  # three parts of a 6x4 picture
    result = _result(6, 4, matte=infer_pb2.MatteImage(data=parts.tobytes(), format=infer_pb2.MATTE_FORMAT_RAW))
    matte = matte_output(result, [], "").matte
    assert matte is not None and matte.shape == (12, 6) and np.array_equal(matte.array(), parts)


def test_bytes_that_are_not_whole_rows_or_not_raw_are_refused_in_words() -> None:
    broken = EncodedImage(bytes(7), ImageFormat.RAW, width=2, channels=4)
    with pytest.raises(ValueError, match="7 raw bytes are not whole rows of 2 pixels of 4 bytes"):
        _ = broken.shape
    unknown = EncodedImage(bytes(8), ImageFormat.RAW)  # built by hand: no width
    with pytest.raises(ValueError, match="not whole rows"):
        unknown.array()
    png = EncodedImage(b"\x89PNG", ImageFormat.PNG, width=2, channels=1)
    with pytest.raises(ValueError, match="array\\(\\) decodes it"):
        _ = png.shape


@pytest.mark.parametrize(("mode", "channels"), [("L", 1), ("1", 1), ("RGB", 3), ("RGBA", 4)])
def test_an_encoded_outputs_array_is_in_the_raw_layout(mode: str, channels: int) -> None:
    pixels = RNG.integers(0, 256, (4, 7, channels) if channels > 1 else (4, 7), dtype=np.uint8)
    picture = Image.fromarray(pixels).convert(mode)
    data = io.BytesIO()
    picture.save(data, format="PNG")
    image = EncodedImage(data.getvalue(), ImageFormat.PNG, channels == 4, width=7, channels=channels)
    expected = np.asarray(picture.convert("L" if channels == 1 else mode))
    assert np.array_equal(image.array(), expected) and image.array().dtype == np.uint8
    if mode == "1":  # a 1-bit mask reads as 0 or 255, as the raw mask
        assert set(np.unique(image.array())) <= {0, 255}


def test_raw_is_a_format_for_one_output_or_every_output() -> None:
    assert calls.matte_options(outputs="matte,mask", format="raw").formats == {"matte": "raw", "mask": "raw"}
    assert calls.matte_options(outputs="matte,cutout", format={"cutout": "raw"}).formats == {"cutout": "raw"}
    with pytest.raises(ValueError, match="png, webp, jpeg or raw"):
        calls.matte_options(outputs="matte", format="tiff")
