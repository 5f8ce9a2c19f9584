"""image.matte's outputs through the real services (u2netp, onnxruntime, the CPU): every output in
every encoding, each checked against what the definitions in docs/API.md give from the answered
matte and the picture; the options' refusals in plain words; requests of SDKs before the outputs."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import numpy as np
import pytest
import torch
from PIL import Image

from craftai import AiClient, CraftAiError, calls
from craftai.calls import MatteOptions
from craftai.policy import Retries
from craftai_dev import servers
from craftai_infer.pipelines import matte_outputs
from craftai_infer.pipelines.matte_spec import Blur, Cover, OutputsSpec
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import common_pb2, infer_pb2, infer_pb2_grpc

ALL = "matte,cutout,composite,mask"
MATTE = infer_pb2.MATTE_OUTPUT_KIND_MATTE


@pytest.fixture(scope="module")
def ai(matte_server: servers.Process) -> Iterator[AiClient]:
    with AiClient(app_id="tests", target=matte_server.address, retries=Retries(attempts=0)) as client:
        yield client


@pytest.fixture(scope="module")
def chelsea(photos: dict[str, Path]) -> bytes:
    return photos["chelsea.png"].read_bytes()


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def _refused(ai: AiClient, picture: bytes, options: MatteOptions) -> CraftAiError:
    """A request the SDK's own checks would refuse, sent as built (what another client may send)."""
    with pytest.raises(CraftAiError) as caught:
        ai.transport.result(calls.MATTE, calls.matte_request(picture, options), None, [], "refusal")
    return caught.value


def test_every_output_in_one_request_is_what_the_definitions_give(ai: AiClient, chelsea: bytes) -> None:
    result = ai.remove_background(chelsea, outputs=ALL, bg_color="#2060f0", threshold=0.5)
    assert (result.width, result.height, result.device) == (451, 300, "cpu")
    assert set(result.images) == {"matte", "cutout", "composite", "mask"}
    assert all(image.format == "png" for image in result.images.values())
    matte = _pixels(result.matte_png)
    cutout = _pixels(result.cutout_png)
    assert result.matte is not None and result.cutout is not None and result.composite is not None
    assert result.mask is not None
    composite, mask = _pixels(result.composite.data), Image.open(io.BytesIO(result.mask.data))
    picture = np.asarray(Image.open(io.BytesIO(chelsea)).convert("RGB"))
    assert matte.shape == (300, 451) and cutout.shape == (300, 451, 4) and composite.shape == (300, 451, 3)
    assert result.cutout.has_alpha and not result.composite.has_alpha
    assert np.array_equal(cutout[:, :, 3], matte)  # the cutout's alpha is the matte
    solid = matte >= 250  # the subject: its colours are (nearly) the picture's
    assert solid.sum() > 1000 and np.abs(cutout[solid][:, :3].astype(int) - picture[solid]).mean() < 2
    partial = (matte > 0) & (matte < 255)
    changed = np.abs(cutout[:, :, :3].astype(int) - picture).max(axis=2)[partial]
    assert (changed > 2).mean() > 0.2  # the estimate moved the colours of the soft edge
    blue = torch.tensor((0x20, 0x60, 0xF0, 255), dtype=torch.uint8).expand(300, 451, 4)
    expected = matte_outputs.composite(torch.from_numpy(cutout.copy()), blue, opaque=True).numpy()
    assert np.array_equal(composite, expected)  # the composite is the cutout over the colour, exactly
    assert mask.mode == "1" and np.array_equal(np.asarray(mask), matte > 127)
    assert set(result.timing_ms) == {"decode", "model", "network", "mask", "cutout", "composite", "encode"}


def test_the_naive_cutout_keeps_the_pictures_colours(ai: AiClient, chelsea: bytes) -> None:
    result = ai.remove_background(chelsea, outputs="cutout", naive=True)
    cutout = _pixels(result.cutout_png)
    picture = np.asarray(Image.open(io.BytesIO(chelsea)).convert("RGB"))
    assert np.array_equal(cutout[:, :, :3], picture) and result.matte is None


def test_webp_is_the_same_pixels_as_png(ai: AiClient, chelsea: bytes) -> None:
    png = ai.remove_background(chelsea, outputs=ALL, bg_blur=6.0)
    webp = ai.remove_background(chelsea, outputs=ALL, bg_blur=6.0, format="webp")
    for name, image in webp.images.items():
        assert image.format == "webp" and image.data[8:12] == b"WEBP", name
        theirs, ours = _pixels(png.images[name].data), _pixels(image.data)
        if ours.ndim == 3 and theirs.ndim == 2:  # grey outputs come back as RGB
            ours = ours[:, :, 0]
        assert np.array_equal(ours, theirs.astype(np.uint8) * (255 if theirs.dtype == bool else 1)), name
    assert webp.matte_png == b"" and webp.cutout_png == b""  # the PNG fields: b"" for another format


def test_a_jpeg_composite_over_a_blur(ai: AiClient, chelsea: bytes) -> None:
    result = ai.remove_background(chelsea, outputs="composite", bg_blur=6.0, format="jpeg", jpeg_quality=95)
    png = ai.remove_background(chelsea, outputs="cutout,composite", bg_blur=6.0)
    assert result.composite is not None and result.composite.format == "jpeg" and png.composite is not None
    jpeg, exact = _pixels(result.composite.data).astype(int), _pixels(png.composite.data).astype(int)
    assert jpeg.shape == exact.shape == (300, 451, 3) and np.abs(jpeg - exact).mean() < 2.5
    picture = np.asarray(Image.open(io.BytesIO(chelsea)).convert("RGB"))
    blurred = matte_outputs.background_layer(Blur(6.0), torch.from_numpy(picture.copy()))
    cutout = torch.from_numpy(_pixels(png.cutout_png).copy())
    assert np.array_equal(exact, matte_outputs.composite(cutout, blurred, opaque=True).numpy())


def test_a_background_picture_scaled_to_cover_and_its_transparency_kept(
    ai: AiClient, chelsea: bytes, photos: dict[str, Path]
) -> None:
    coffee = photos["coffee.png"].read_bytes()
    result = ai.remove_background(chelsea, outputs="matte,composite", bg_image=coffee, naive=True)
    assert result.composite is not None
    picture = np.asarray(Image.open(io.BytesIO(chelsea)).convert("RGB"))
    spec = OutputsSpec(
        frozenset({"composite"}), naive=True, background=Cover(np.asarray(Image.open(photos["coffee.png"])))
    )
    expected = matte_outputs.render(picture, _pixels(result.matte_png), spec, "cpu").composite
    assert expected is not None and np.array_equal(_pixels(result.composite.data), expected)
    see_through = io.BytesIO()
    Image.new("RGBA", (40, 30), (255, 0, 0, 100)).save(see_through, format="PNG")
    clear = ai.remove_background(chelsea, outputs="composite", bg_image=see_through.getvalue())
    assert clear.composite is not None and clear.composite.has_alpha
    assert _pixels(clear.composite.data).shape == (300, 451, 4)
    error = _refused(
        ai, chelsea, calls.matte_options(outputs="composite", bg_image=see_through.getvalue(), format="jpeg")
    )
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_OUTPUT")
    assert "JPEG cannot hold it" in error.message and error.violations[0][0] == "outputs[0].format"


def test_the_mask_at_the_callers_threshold(ai: AiClient, chelsea: bytes) -> None:
    matte = _pixels(ai.remove_background(chelsea, outputs="matte").matte_png)
    for threshold in (0.0, 0.2, 0.9, 1.0):
        result = ai.remove_background(chelsea, outputs="mask", threshold=threshold)
        assert result.mask is not None and result.matte is None  # only the selection
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(result.mask.data))), matte / 255 > threshold)


def test_the_png_level_is_the_callers(ai: AiClient, chelsea: bytes) -> None:
    stored = ai.remove_background(chelsea, outputs="matte", png_level=0)
    smallest = ai.remove_background(chelsea, outputs="matte", png_level=9)
    assert len(stored.matte_png) > 451 * 300 > len(smallest.matte_png)
    assert np.array_equal(_pixels(stored.matte_png), _pixels(smallest.matte_png))


def test_a_transparent_pictures_own_alpha_is_in_every_output(ai: AiClient) -> None:
    picture = Image.new("RGBA", (64, 48), (200, 40, 40, 255))
    picture.paste((0, 0, 0, 0), (0, 0, 32, 48))  # the left half transparent
    data = io.BytesIO()
    picture.save(data, format="PNG")
    result = ai.remove_background(data.getvalue(), outputs="cutout,mask", threshold=0.0)
    assert result.cutout is not None and result.mask is not None
    assert (_pixels(result.cutout.data)[:, :32, 3] == 0).all()
    assert not np.asarray(Image.open(io.BytesIO(result.mask.data)))[:, :32].any()


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        (MatteOptions(outputs=("matte",), formats={"matte": "jpeg"}), "outputs[0].format", "cannot be a JPEG"),
        (MatteOptions(outputs=("matte", "cutout", "matte")), "outputs[2].kind", "asks for the matte again"),
        (MatteOptions(outputs=("mask",), threshold=1.5), "mask_threshold", "in [0, 1]"),
        (MatteOptions(outputs=("matte",), png_level=10), "png_compress_level", "0 (none) to 9"),
        (MatteOptions(outputs=("matte",), jpeg_quality=0), "jpeg_quality", "1 to 100"),
        (MatteOptions(outputs=("composite",), bg_blur=0.0), "background.blur_radius", "more than 0"),
        (MatteOptions(outputs=("composite",), bg_blur=501.0), "background.blur_radius", "at most 500"),
        (MatteOptions(outputs=("composite",), bg_color=(300, 0, 0, 255)), "background.color", "over 255"),
        (
            MatteOptions(outputs=("composite",), formats={"composite": "jpeg"}, bg_color=(0, 0, 0, 128)),
            "outputs[0].format",
            "alpha 128",
        ),
    ],
)
def test_options_that_cannot_be_answered_are_refused_in_plain_words(
    ai: AiClient, chelsea: bytes, options: MatteOptions, field: str, words: str
) -> None:
    error = _refused(ai, chelsea, options)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_OUTPUT")
    assert words in error.message and [f for f, _ in error.violations] == [field]


def test_requests_of_other_clients_are_refused_or_answered_as_before(
    matte_server: servers.Process, chelsea: bytes
) -> None:
    """Unknown kinds and formats, want_cutout beside outputs, a bad background picture; and a
    request without outputs (an SDK before them) gets matte_png and cutout_png as it did."""
    with loopback_channel(matte_server.address) as channel:
        stub = infer_pb2_grpc.InferServiceStub(channel)

        def call(request: infer_pb2.MatteRequest) -> infer_pb2.MatteResult:
            events = list(stub.Matte(request, metadata=servers.app_metadata(), timeout=120))
            return events[-1].result

        picture = common_pb2.Picture(data=chelsea)
        old = call(infer_pb2.MatteRequest(picture=picture, want_cutout=True))
        assert _pixels(old.matte_png).shape == (300, 451) and _pixels(old.cutout_png).shape == (300, 451, 4)
        assert not old.HasField("matte") and not old.HasField("cutout")
        new = call(
            infer_pb2.MatteRequest(
                picture=picture, outputs=[infer_pb2.MatteOutputSpec(kind=infer_pb2.MATTE_OUTPUT_KIND_CUTOUT)]
            )
        )
        assert new.matte_png == b"" and new.cutout.format == infer_pb2.MATTE_FORMAT_PNG and new.cutout.has_alpha
        cases = [
            (infer_pb2.MatteRequest(picture=picture, outputs=[infer_pb2.MatteOutputSpec()]), "outputs[0].kind"),
            (
                infer_pb2.MatteRequest(
                    picture=picture,
                    outputs=[infer_pb2.MatteOutputSpec(kind=cast(infer_pb2.MatteOutputKind.ValueType, 9))],
                ),
                "outputs[0].kind",
            ),
            (
                infer_pb2.MatteRequest(
                    picture=picture,
                    outputs=[infer_pb2.MatteOutputSpec(kind=MATTE, format=cast(infer_pb2.MatteFormat.ValueType, 7))],
                ),
                "outputs[0].format",
            ),
            (
                infer_pb2.MatteRequest(
                    picture=picture, want_cutout=True, outputs=[infer_pb2.MatteOutputSpec(kind=MATTE)]
                ),
                "want_cutout",
            ),
            (
                infer_pb2.MatteRequest(
                    picture=picture,
                    outputs=[infer_pb2.MatteOutputSpec(kind=infer_pb2.MATTE_OUTPUT_KIND_COMPOSITE)],
                    background=infer_pb2.MatteBackground(picture=common_pb2.Picture(data=b"not a picture")),
                ),
                "background.picture.data",
            ),
        ]
        for request, field in cases:
            with pytest.raises(grpc.RpcError) as caught:
                call(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            error = CraftAiError.from_rpc(caught.value)
            assert [f for f, _ in error.violations] == [field], (field, error.message)
        assert "the background picture:" in error.message


def test_webp_refuses_a_picture_wider_than_it_can_hold(ai: AiClient) -> None:
    wide = io.BytesIO()
    Image.new("RGB", (16384, 2), (90, 90, 90)).save(wide, format="PNG")
    error = _refused(ai, wide.getvalue(), MatteOptions(outputs=("matte",), formats={"matte": "webp"}))
    assert error.reason == "BAD_OUTPUT" and "at most 16383 pixels" in error.message


@pytest.mark.parametrize("name", ["chelsea.png", "rocket.jpg"])
def test_raw_outputs_are_the_png_outputs_pixels(ai: AiClient, photos: dict[str, Path], name: str) -> None:
    """Every output raw is the PNG output decoded, pixel for pixel: the matte and the mask 1 byte
    a pixel (the mask 0 or 255), the cutout RGBA, the composite RGB over an opaque colour."""
    picture = photos[name].read_bytes()
    png = ai.remove_background(picture, outputs=ALL, bg_color="#2060f0", threshold=0.4)
    raw = ai.remove_background(picture, outputs=ALL, bg_color="#2060f0", threshold=0.4, format="raw")
    assert (raw.width, raw.height) == (png.width, png.height)
    layouts = {"matte": 1, "mask": 1, "cutout": 4, "composite": 3}
    for output, image in raw.images.items():
        expected = _pixels(png.images[output].data)
        if expected.dtype == bool:  # the PNG mask is 1-bit
            expected = expected.astype(np.uint8) * 255
        assert image.format == "raw" and image.media_type == "application/octet-stream" and image.suffix == ".raw"
        assert len(image.data) == raw.width * raw.height * layouts[output], output  # no header
        assert image.channels == layouts[output] and image.has_alpha == (output == "cutout"), output
        assert image.shape == expected.shape, output
        assert np.array_equal(np.frombuffer(image.data, np.uint8).reshape(expected.shape), expected), output
        assert np.array_equal(image.array(), expected) and np.array_equal(png.images[output].array(), expected)
    assert raw.mask is not None and set(raw.mask.data) <= {0, 255}
    assert raw.matte_png == b"" and raw.cutout_png == b""


def test_a_raw_composite_over_a_translucent_colour_is_rgba_as_the_png(ai: AiClient, chelsea: bytes) -> None:
    png = ai.remove_background(chelsea, outputs="composite", bg_color=(20, 200, 40, 100))
    raw = ai.remove_background(chelsea, outputs="composite", bg_color=(20, 200, 40, 100), format="raw")
    assert png.composite is not None and raw.composite is not None
    assert raw.composite.has_alpha and png.composite.has_alpha and raw.composite.channels == 4
    assert len(raw.composite.data) == 451 * 300 * 4
    assert np.array_equal(raw.composite.array(), _pixels(png.composite.data))


def test_raw_outputs_too_large_for_a_message_are_refused_before_any_work(ai: AiClient) -> None:
    """A raw cutout of a 4100x4100 picture is 67,240,000 bytes, over the server's 64 MiB message
    limit: refused from the picture's header, naming the limit and what to ask instead."""
    big = io.BytesIO()
    Image.new("RGB", (4100, 4100), (90, 90, 90)).save(big, format="PNG")
    with pytest.raises(CraftAiError) as caught:
        ai.remove_background(big.getvalue(), outputs="cutout", format="raw")
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_REACHED")
    assert "the raw cutout of a 4100x4100 picture come to 67,240,000 bytes" in error.message
    assert "67,108,864 bytes a message may carry (CRAFTAI_MAX_MESSAGE_BYTES)" in error.message
    assert "ask for PNG or WebP" in error.message


def test_the_jpeg_rules_stand_beside_raw(ai: AiClient, chelsea: bytes) -> None:
    """The JPEG rules stand beside raw: a JPEG matte is still refused, a raw matte answered."""
    error = _refused(ai, chelsea, MatteOptions(outputs=("matte",), formats={"matte": "jpeg"}))
    assert error.reason == "BAD_OUTPUT" and "cannot be a JPEG" in error.message
    raw = ai.remove_background(chelsea, outputs="matte,composite", format={"matte": "raw", "composite": "jpeg"})
    assert raw.matte is not None and raw.matte.format == "raw" and raw.composite is not None
    assert raw.composite.format == "jpeg" and raw.matte.shape == (300, 451)
