"""Bad input, each answered in plain words while the server keeps serving (docs/API.md, Pictures).

Pictures go through both features: image.matte on `craftai serve` with u2netp (matte_server), and
image.segment on a server of the SAM fixture whose message limit is lowered to 1 MiB, so that a
message over the limit is cheap to send. After every refusal the server must still answer.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, Retries, SegmentSession
from craftai_dev import servers
from craftai_dev.segment import SetUpStore, mask_of
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import common_pb2, infer_pb2, infer_pb2_grpc

MiB = 1 << 20
NO_RETRY = Retries(attempts=0)


def _encode(picture: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    picture.save(out, format=fmt, **options)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png_declaring(width: int, height: int) -> bytes:
    """A valid-looking PNG header declaring `width` x `height` RGB, with a few bytes of data."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _chunk(b"IEND", b"")
    )


def _photo() -> Image.Image:
    from craftai_dev.samples import photos

    return Image.open(photos()["chelsea.png"]).convert("RGB")


def _corrupt_middle(data: bytes) -> bytes:
    damaged = bytearray(data)
    middle = len(damaged) // 2
    damaged[middle : middle + 64] = b"\xff" * 64
    return bytes(damaged)


def _animated(fmt: str) -> bytes:
    frames = [Image.new("RGB", (32, 24), colour) for colour in ((250, 0, 0), (0, 250, 0), (0, 0, 250))]
    return _encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100)


def _refusals() -> dict[str, tuple[bytes, str, str]]:
    """name -> (bytes, reason, words the message must contain)."""
    photo = _photo()
    png, jpeg, webp = (_encode(photo, f) for f in ("PNG", "JPEG", "WEBP"))
    return {
        "truncated PNG": (png[: len(png) // 2], "BAD_PICTURE", "could not be decoded: image file is truncated"),
        "truncated JPEG": (jpeg[: len(jpeg) // 2], "BAD_PICTURE", "could not be decoded: image file is truncated"),
        "truncated WebP": (webp[: len(webp) // 2], "BAD_PICTURE", "damaged"),
        "corrupt PNG": (_corrupt_middle(png), "BAD_PICTURE", "could not be decoded"),
        "corrupt JPEG": (_corrupt_middle(jpeg), "BAD_PICTURE", "could not be decoded"),
        "corrupt WebP": (_corrupt_middle(webp), "BAD_PICTURE", "could not be decoded"),
        "decompression bomb": (_png_declaring(100_000, 100_000), "PICTURE_TOO_LARGE", "far beyond any limit"),
        "bomb under Pillow's own limit": (_png_declaring(9000, 9000), "PICTURE_TOO_LARGE", "is 9000x9000 pixels"),
        "0x0 picture": (_png_declaring(0, 0), "BAD_PICTURE", "not a PNG, JPEG or WebP"),
        "animated GIF": (_animated("GIF"), "BAD_PICTURE", "not a PNG, JPEG or WebP"),
        "animated PNG": (_animated("PNG"), "BAD_PICTURE", "is animated (3 frames); send a still picture"),
        "animated WebP": (_animated("WEBP"), "BAD_PICTURE", "is animated (3 frames)"),
        "empty": (b"", "EMPTY_PICTURE", "the picture is empty"),
        "text": (b"hello, world", "BAD_PICTURE", "not a PNG, JPEG or WebP"),
    }


REFUSALS = _refusals()


def damaged_jpegs() -> dict[str, bytes]:
    """Damaged JPEGs of each kind the decoder meets: baseline and progressive (simplejpeg), CMYK
    (Pillow's conversion after simplejpeg's strict check); scan data corrupted with the end marker
    in place, and half a file with the end marker appended."""
    photo = _photo()

    def jpeg(picture: Image.Image, **options: object) -> bytes:
        out = io.BytesIO()
        picture.save(out, format="JPEG", quality=90, **options)
        return out.getvalue()

    def scrambled(data: bytes) -> bytes:  # scan bytes changed, every marker (0xFF) left alone
        damaged = bytearray(data)
        for i in range(len(damaged) // 2, len(damaged) // 2 + 200, 3):
            if damaged[i] != 0xFF and damaged[i] ^ 0x55 != 0xFF:
                damaged[i] ^= 0x55
        return bytes(damaged)

    found = {}
    for kind, data in (
        ("baseline", jpeg(photo)),
        ("progressive", jpeg(photo, progressive=True)),
        ("CMYK", jpeg(photo.convert("CMYK"))),
    ):
        found[f"{kind}: corrupt scan data, EOI present"] = scrambled(data)
        found[f"{kind}: half a JPEG with EOI appended"] = data[: len(data) // 2] + b"\xff\xd9"
    return found


def _cmyk_jpeg() -> bytes:
    return _encode(_photo().convert("CMYK"), "JPEG", quality=95)


def _grey16_png() -> tuple[bytes, Image.Image]:
    """A 16-bit grey PNG and the 8-bit picture it must be read as (v / 257, rounded)."""
    grey = np.asarray(_photo().convert("L"), dtype=np.uint16) * 257 + 100
    sixteen = Image.fromarray(grey.astype(np.uint16))
    assert sixteen.mode == "I;16"
    eight = Image.fromarray(np.floor(grey / 257.0 + 0.5).clip(0, 255).astype(np.uint8), mode="L")
    return _encode(sixteen, "PNG"), eight


@pytest.fixture(scope="module")
def matte(matte_server: servers.Process) -> Iterator[AiClient]:
    with AiClient("tests", target=matte_server.address, retries=NO_RETRY) as ai:
        yield ai


def _serving(ai: AiClient) -> None:
    assert ai.remove_background(_encode(Image.new("RGB", (40, 30), (10, 200, 30)), "PNG"), outputs="matte").width == 40


@pytest.mark.parametrize("name", list(REFUSALS))
def test_a_bad_picture_is_refused_in_plain_words_and_the_server_goes_on(name: str, matte: AiClient) -> None:
    data, reason, words = REFUSALS[name]
    with pytest.raises(CraftAiError) as caught:
        matte.remove_background(data, outputs="matte")
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason), error
    assert words in error.message, error.message
    assert [field for field, _ in error.violations] == ["picture.data"]
    _serving(matte)


def test_a_1x1_picture_is_answered(matte: AiClient) -> None:
    result = matte.remove_background(_encode(Image.new("RGB", (1, 1), (200, 30, 30)), "PNG"), outputs="matte,cutout")
    assert (result.width, result.height) == (1, 1)
    assert Image.open(io.BytesIO(result.matte_png)).size == (1, 1)
    assert Image.open(io.BytesIO(result.cutout_png)).mode == "RGBA"


def test_a_cmyk_jpeg_is_matted_as_its_rgb_conversion(matte: AiClient) -> None:
    data = _cmyk_jpeg()
    as_rgb = _encode(Image.open(io.BytesIO(data)).convert("RGB"), "PNG")
    result = matte.remove_background(data, outputs="matte,cutout")
    assert (result.width, result.height) == (451, 300)
    assert result.matte_png == matte.remove_background(as_rgb, outputs="matte").matte_png
    assert Image.open(io.BytesIO(result.cutout_png)).mode == "RGBA"


def test_a_16_bit_picture_is_scaled_to_8_bits_not_clipped(matte: AiClient) -> None:
    data, eight = _grey16_png()
    result = matte.remove_background(data, outputs="matte,cutout")
    assert result.matte_png == matte.remove_background(_encode(eight, "PNG"), outputs="matte").matte_png
    clipped = Image.open(io.BytesIO(data)).convert("L")  # what a naive conversion would see: all white
    assert np.asarray(clipped).min() == 255 and np.asarray(eight).std() > 10


def test_unknown_feature_recipe_and_engine_are_named(matte: AiClient, matte_server: servers.Process) -> None:
    picture = _encode(Image.new("RGB", (8, 8)), "PNG")
    with pytest.raises(CraftAiError) as caught:
        matte.remove_background(picture, outputs="matte", recipe="no-such-recipe")
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_RECIPE")
    assert "u2netp" in caught.value.message  # it lists what exists
    with pytest.raises(CraftAiError) as caught:
        list(matte.setup("image.blur"))
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_FEATURE")
    with loopback_channel(matte_server.address) as channel, pytest.raises(grpc.RpcError) as raw:
        list(
            infer_pb2_grpc.InferServiceStub(channel).Load(
                infer_pb2.LoadRequest(route=common_pb2.RouteRef(feature="image.blur")),
                metadata=servers.app_metadata(),
                timeout=10,
            )
        )
    assert raw.value.code() == grpc.StatusCode.NOT_FOUND
    _serving(matte)


def _runtime(address: str, metadata: tuple[tuple[str, str], ...]) -> grpc.Call:
    with loopback_channel(address) as channel:
        _, call = infer_pb2_grpc.InferServiceStub(channel).GetRuntime.with_call(
            infer_pb2.GetRuntimeRequest(), metadata=metadata, timeout=10
        )
    return call


def test_oversized_app_ids_and_metadata_are_refused(matte: AiClient, matte_server: servers.Process) -> None:
    key = servers.app_metadata()[1]
    with pytest.raises(grpc.RpcError) as caught:
        _runtime(matte_server.address, (("craftai-app-id", "a" * 65), key))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "1 to 64 letters" in (caught.value.details() or "")
    with pytest.raises(grpc.RpcError) as caught:  # a key far longer than any key: refused, never hashed
        _runtime(matte_server.address, (("craftai-app-id", "tests"), ("craftai-app-key", "k" * 4000)))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    call = _runtime(matte_server.address, (*servers.app_metadata(), ("x-request-id", "r" * 500)))
    (echoed,) = [v for k, v in call.trailing_metadata() or () if k == "x-request-id"]
    assert echoed != "r" * 500 and len(echoed) == 32  # unusable: the server made its own
    with pytest.raises(grpc.RpcError) as caught:  # beyond gRPC's own metadata limit (16 KiB by default)
        _runtime(matte_server.address, (*servers.app_metadata(), ("x-padding", "p" * 64 * 1024)))
    assert caught.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL)
    _serving(matte)


# -- image.segment ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def segment_server(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    env = {"CRAFTAI_MAX_MESSAGE_BYTES": str(MiB), "CRAFTAI_MAX_POINTS": "8", "CRAFTAI_MAX_SESSIONS_PER_APP": "1"}
    with servers.running(sam_store.serve(tmp_path_factory.mktemp("bad-input-segment"), env)) as process:
        yield process


@pytest.fixture(scope="module")
def segmenting(segment_server: servers.Process) -> Iterator[AiClient]:
    with AiClient("tests", target=segment_server.address, retries=NO_RETRY) as ai:
        yield ai


@pytest.fixture(scope="module")
def session(segmenting: AiClient) -> Iterator[SegmentSession]:
    """The one session app "tests" may keep on this server (CRAFTAI_MAX_SESSIONS_PER_APP=1)."""
    with segmenting.open_session(_encode(Image.new("RGB", (64, 48), (120, 40, 200)), "PNG")) as opened:
        yield opened


NAN, INF = float("nan"), float("inf")
PROMPTS: dict[str, tuple[list[tuple[float, float, bool]], tuple[float, float, float, float] | None, str, str]] = {
    "NaN x": ([(NAN, 10, True)], None, "prompt.points[0]", "not a finite number"),
    "infinite y": ([(10, INF, True)], None, "prompt.points[0]", "not a finite number"),
    "negative x": ([(10, 10, True), (-1, 10, False)], None, "prompt.points[1]", "is outside the 64x48 picture"),
    "beyond the width": ([(64.5, 10, True)], None, "prompt.points[0]", "x must be in [0, 64]"),
    "box with NaN": ([], (0, 0, NAN, 10), "prompt.box", "not a finite number"),
    "box outside": ([], (0, 0, 65, 48), "prompt.box", "goes outside the 64x48 picture"),
    "too many points": ([(1, 1, True)] * 9, None, "prompt.points", "the prompt has 9 points; at most 8"),
}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_a_bad_prompt_is_refused_naming_its_field(name: str, session: SegmentSession) -> None:
    points, box, field, words = PROMPTS[name]
    with pytest.raises(CraftAiError) as caught:
        session.segment(points=points, box=box)
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and words in error.message, error
    assert [f for f, _ in error.violations] == [field]
    assert not session.segment(points=[(32, 24, True)]).reopened  # the session and the server go on


def test_an_unknown_session_is_not_found(segment_server: servers.Process, session: SegmentSession) -> None:
    with loopback_channel(segment_server.address) as channel, pytest.raises(grpc.RpcError) as caught:
        list(
            infer_pb2_grpc.InferServiceStub(channel).Segment(
                infer_pb2.SegmentRequest(
                    session_id="not-a-session",
                    prompt=infer_pb2.Prompt(points=[infer_pb2.Point(x=1, y=1, label=infer_pb2.POINT_LABEL_FOREGROUND)]),
                ),
                metadata=servers.app_metadata(),
                timeout=10,
            )
        )
    assert CraftAiError.from_rpc(caught.value).reason == "SESSION_NOT_FOUND"


def test_a_message_over_the_size_limit_is_refused_by_grpc_with_a_clear_error(
    segment_server: servers.Process, session: SegmentSession
) -> None:
    big = b"\x89PNG\r\n\x1a\n" + bytes(2 * MiB)
    with loopback_channel(segment_server.address) as channel, pytest.raises(grpc.RpcError) as caught:
        list(
            infer_pb2_grpc.InferServiceStub(channel).OpenSession(
                infer_pb2.OpenSessionRequest(picture=common_pb2.Picture(data=big)),
                metadata=servers.app_metadata(),
                timeout=30,
            )
        )
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in (caught.value.details() or "")
    error = CraftAiError.from_rpc(caught.value)  # what the SDK tells the app
    assert "larger than the gRPC message limit" in error.message and "CRAFTAI_MAX_MESSAGE_BYTES" in error.message
    with AiClient("tests", target=segment_server.address, retries=NO_RETRY, max_message_bytes=MiB) as ai:
        with pytest.raises(CraftAiError) as refused:  # the SDK's own limit says the same before sending
            ai.segment_once(big, points=[(1, 1, True)])
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than the gRPC message limit" in refused.value.message
    assert not session.segment(points=[(32, 24, True)]).reopened


def test_segment_takes_1x1_cmyk_and_16_bit_pictures(segmenting: AiClient) -> None:
    tiny = segmenting.segment_once(_encode(Image.new("RGB", (1, 1), (9, 9, 9)), "PNG"), points=[(0.5, 0.5, True)])
    assert (tiny.width, tiny.height) == (1, 1) and mask_of(tiny.best.png).shape == (1, 1)
    cmyk = segmenting.segment_once(_cmyk_jpeg(), points=[(200, 150, True)])
    assert (cmyk.width, cmyk.height) == (451, 300) and mask_of(cmyk.best.png).shape == (300, 451)
    data, _ = _grey16_png()  # read as 8 bits by the same conversion the matte test checks pixel for pixel
    sixteen = segmenting.segment_once(data, points=[(200, 150, True)])
    assert (sixteen.width, sixteen.height) == (451, 300) and mask_of(sixteen.best.png).shape == (300, 451)


def test_pictures_refused_by_segment_too(segmenting: AiClient, session: SegmentSession) -> None:
    for name in ("truncated JPEG", "decompression bomb", "animated GIF"):
        data, reason, _ = REFUSALS[name]
        with pytest.raises(CraftAiError) as caught:
            segmenting.segment_once(data, points=[(1, 1, True)])
        assert caught.value.reason == reason, name
    assert not session.segment(points=[(32, 24, True)]).reopened


def test_sessions_per_app_are_limited_with_a_retry_info(
    segmenting: AiClient, segment_server: servers.Process, session: SegmentSession
) -> None:
    """CRAFTAI_MAX_SESSIONS_PER_APP=1 here: the app holding `session` is refused a second one before
    any work, and so is another app id under the same local `*` key: the ids a `*` key admits are
    one tenant, so made-up ids do not multiply the limit (an app with a key of its own is a tenant
    of its own: tests/integration/test_segment_sessions.py)."""
    picture = _encode(Image.new("RGB", (16, 12), (1, 2, 3)), "PNG")
    with pytest.raises(CraftAiError) as caught:
        segmenting.open_session(picture)
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_SESSIONS")
    assert error.retry_after is not None and "close one (CloseSession) or use SegmentOnce" in error.message
    with AiClient("another-app", target=segment_server.address) as other, pytest.raises(CraftAiError) as made_up:
        other.open_session(picture)
    assert made_up.value.reason == "TOO_MANY_SESSIONS" and "without a key of their own" in made_up.value.message


@pytest.mark.parametrize("name", list(damaged_jpegs()))
def test_a_damaged_jpeg_is_refused_by_both_features_alike(
    name: str, matte: AiClient, segmenting: AiClient, session: SegmentSession
) -> None:
    """Corrupt scan data (end marker present) and half a JPEG with the end marker appended: both
    features refuse the same picture with the same BAD_PICTURE and the same words, whichever
    decoder the kind of JPEG goes through (libjpeg's "Corrupt JPEG data" is an error, never a
    picture painted grey where the data was unreadable)."""
    data = damaged_jpegs()[name]
    answers = []
    for call in (
        lambda: matte.remove_background(data, outputs="matte"),
        lambda: segmenting.segment_once(data, points=[(1, 1, True)]),
    ):
        with pytest.raises(CraftAiError) as caught:
            call()
        answers.append((caught.value.code, caught.value.reason, caught.value.message))
    assert answers[0] == answers[1], answers
    assert answers[0][:2] == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_PICTURE")
    assert "Corrupt JPEG data" in answers[0][2] or "could not be decoded" in answers[0][2]
    _serving(matte)
    assert not session.segment(points=[(32, 24, True)]).reopened
