"""MATTE_FORMAT_RAW in infer's option checks and costs (craftai_infer.matte_options,
features/matte.py): raw is taken for every output, the JPEG rules stay as they were, the raw bytes
a request asks for are known from the picture's size before any work, refused when they could not
fit one message, and counted in the memory the request is admitted with."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from craftai_common.errors import ServiceError
from craftai_infer import encodings, matte_options
from craftai_infer.encodings import Encoding
from craftai_infer.features import matte
from craftai_infer.pipelines.matte_spec import Kind
from craftai_wire.v1 import common_pb2, infer_pb2
from craftai_wire.vocabulary import Reason

RAW = infer_pb2.MATTE_FORMAT_RAW
KINDS: dict[Kind, infer_pb2.MatteOutputKind.ValueType] = {
    "matte": infer_pb2.MATTE_OUTPUT_KIND_MATTE,
    "cutout": infer_pb2.MATTE_OUTPUT_KIND_CUTOUT,
    "composite": infer_pb2.MATTE_OUTPUT_KIND_COMPOSITE,
    "mask": infer_pb2.MATTE_OUTPUT_KIND_MASK,
}


def _request(
    formats: dict[Kind, infer_pb2.MatteFormat.ValueType], background: infer_pb2.MatteBackground | None = None
) -> infer_pb2.MatteRequest:
    outputs = [infer_pb2.MatteOutputSpec(kind=KINDS[kind], format=fmt) for kind, fmt in formats.items()]
    return infer_pb2.MatteRequest(outputs=outputs, background=background)


def _refused(request: infer_pb2.MatteRequest) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        matte_options.check(request, png_level=1)
    return caught.value


def test_every_output_may_be_raw() -> None:
    asked = matte_options.check(_request(dict.fromkeys(KINDS, RAW)), png_level=1)
    assert asked.kinds == tuple(KINDS) and asked.raw == tuple(KINDS)
    assert all(asked.encodings[kind].format == "raw" for kind in KINDS)
    assert matte_options.FORMAT_OF[RAW] == "raw" and matte_options.FORMAT_VALUES["raw"] == RAW


def test_an_unknown_format_names_raw_among_the_formats() -> None:
    error = _refused(_request({"matte": 9}))  # type: ignore[dict-item]
    assert error.reason == Reason.BAD_OUTPUT and "MATTE_FORMAT_RAW" in error.message


@pytest.mark.parametrize("kind", ["matte", "cutout", "mask"])
def test_jpeg_is_still_the_composites_alone(kind: Kind) -> None:
    error = _refused(_request({kind: infer_pb2.MATTE_FORMAT_JPEG}))
    assert f"the {kind} cannot be a JPEG" in error.message and "ask for PNG or WebP" in error.message
    see_through = infer_pb2.MatteBackground(color=infer_pb2.MatteColor(r=1, g=2, b=3, a=128))
    error = _refused(_request({"composite": infer_pb2.MATTE_FORMAT_JPEG}, see_through))
    assert "JPEG cannot hold it: ask for PNG or WebP" in error.message
    raw = matte_options.check(_request({"composite": RAW}, see_through), png_level=1)  # raw holds alpha
    assert raw.raw == ("composite",)


def test_the_raw_bytes_are_known_from_the_pictures_size() -> None:
    every = matte_options.check(_request(dict.fromkeys(KINDS, RAW)), png_level=1)
    assert every.raw_bytes(10, 7) == (1 + 4 + 3 + 1) * 70  # over the default white: an RGB composite
    translucent = infer_pb2.MatteBackground(color=infer_pb2.MatteColor(r=0, g=0, b=0, a=254))
    picture = infer_pb2.MatteBackground(picture=common_pb2.Picture(data=b"..."))
    blur = infer_pb2.MatteBackground(blur_radius=4.0)
    for background, size in ((translucent, 4), (picture, 4), (blur, 3)):
        asked = matte_options.check(_request({"composite": RAW}, background), png_level=1)
        assert asked.raw_bytes(10, 7) == size * 70
    mixed = matte_options.check(
        _request({"matte": RAW, "cutout": infer_pb2.MATTE_FORMAT_PNG, "mask": infer_pb2.MATTE_FORMAT_WEBP}),
        png_level=1,
    )
    assert mixed.raw == ("matte",) and mixed.raw_bytes(10, 7) == 70  # encoded outputs are not counted here


def test_the_raw_layout_is_what_the_encoder_writes() -> None:
    """RAW_BYTES_PER_PIXEL (the admitted cost, the message check) against the encoder's bytes of
    each output as the pipeline makes it (a composite over a translucent background: RGBA)."""
    made: dict[Kind, np.ndarray] = {
        "matte": np.zeros((7, 10), np.uint8),
        "mask": np.zeros((7, 10), bool),
        "cutout": np.zeros((7, 10, 4), np.uint8),
        "composite": np.zeros((7, 10, 4), np.uint8),
    }
    for kind, pixels in made.items():
        assert len(encodings.encode(pixels, Encoding("raw"))) == matte_options.RAW_BYTES_PER_PIXEL[kind] * 70, kind


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_raw_outputs_answer_is_in_the_admitted_cost(kind: Kind) -> None:
    """The answer's bytes a pixel admitted before any work hold the raw bytes and gRPC's copy."""
    answer = matte.bytes_per_pixel([kind], naive=True) - matte.bytes_per_pixel([], naive=True)
    making = {"matte": 0, "mask": matte.MASK_BYTES_PER_PIXEL, "cutout": matte.NAIVE_CUTOUT_BYTES_PER_PIXEL}
    made = making.get(kind, matte.COMPOSITE_BYTES_PER_PIXEL)
    assert answer - made == matte.ANSWER_BYTES_PER_PIXEL[kind] == 2 * matte_options.RAW_BYTES_PER_PIXEL[kind]


def test_raw_outputs_over_the_message_limit_are_refused_in_words() -> None:
    asked = matte_options.check(_request({"matte": RAW, "cutout": RAW}), png_level=1)
    matte.check_raw_size(asked, 100, 100, 5 * 100 * 100, "a 100x100 picture")  # exactly the limit: fits
    with pytest.raises(ServiceError) as caught:
        matte.check_raw_size(asked, 100, 100, 5 * 100 * 100 - 1, "a 100x100 picture")
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.LIMIT_REACHED)
    assert "the raw matte and cutout of a 100x100 picture come to 50,000 bytes" in error.message
    assert "49,999 bytes a message may carry (CRAFTAI_MAX_MESSAGE_BYTES)" in error.message
    assert "ask for PNG or WebP" in error.message
    assert error.metadata == {"answer_bytes": "50000", "limit_bytes": "49999"}
    encoded = matte_options.check(_request({"cutout": infer_pb2.MATTE_FORMAT_PNG}), png_level=1)
    matte.check_raw_size(encoded, 100_000, 100_000, 1, "a huge picture")  # an encoding's size is known only once made
