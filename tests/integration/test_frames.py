"""MatteFrames on a real `craftai serve` (u2netp's real weights, on the CPU): each frame's outputs are
remove_background's of the same picture byte for byte, raw pixels or encoded, in the frames' order;
the frames are read only as fast as answers come; a frame of another size, bad options, a silent
caller and the app's own failing iterable end the stream in plain words; a stream whose server
went away is tried again and loses no frame; both clients. Then the
command on a made clip: PNG frames equal to the SDK's, a .webm keeping transparency and sound, an
.mp4 composite, and a damaged input leaving nothing behind."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, AsyncAiClient, CraftAiError, FrameOutput, Retries
from craftai.video import VideoReader
from craftai_dev import clips, servers
from craftai_infer.pipelines import matte_temporal
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc
from craftai_wire.vocabulary import Reason

pytestmark = pytest.mark.slow
IDLE = 3.0  # CRAFTAI_FRAMES_IDLE_SECONDS of this module's server
MAX_IN_FLIGHT = 4
SIZE = (200, 150)


@pytest.fixture(scope="module")
def server(local_catalogue: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with u2netp set up; a short idle limit and a low in-flight cap to test them."""
    root = tmp_path_factory.mktemp("frames")
    env = {
        "CRAFTAI_RECIPES": str(local_catalogue),
        "CRAFTAI_FRAMES_IDLE_SECONDS": str(IDLE),
        "CRAFTAI_MAX_FRAMES_IN_FLIGHT": str(MAX_IN_FLIGHT),
        "CRAFTAI_FRAMES_IN_FLIGHT": "2",
    }
    with servers.running(servers.embedded(root / "store", root, env)) as process:
        with AiClient(app_id="tests", target=process.address) as ai:
            list(ai.setup("image.matte", "u2netp"))
        yield process


@pytest.fixture(scope="module")
def ai(server: servers.Process) -> Iterator[AiClient]:
    with AiClient(app_id="frames-tests", target=server.address) as client:
        yield client


@pytest.fixture(scope="module")
def frames(photos: dict[str, Path]) -> list[npt.NDArray[np.uint8]]:
    """Six frames of one size: the photos in turn, each shifted a little (the pictures differ)."""
    found = []
    names = ["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg"]
    for index in range(6):
        picture = Image.open(photos[names[index % len(names)]]).convert("RGB").resize(SIZE)
        found.append(np.roll(np.asarray(picture), index * 7, axis=1))
    return found


def _png(pixels: npt.NDArray[np.uint8]) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def test_each_frame_is_remove_background_of_its_picture_in_order(
    ai: AiClient, frames: list[npt.NDArray[np.uint8]]
) -> None:
    got = list(ai.remove_background_frames(iter(frames), outputs="matte,cutout", in_flight=3))
    assert [frame.index for frame in got] == list(range(len(frames)))
    mattes = set()
    for frame, pixels in zip(got, frames, strict=True):
        alone = ai.remove_background(_png(pixels), outputs="matte,cutout")
        assert frame.output.matte is not None and frame.output.cutout is not None
        assert alone.matte is not None and alone.cutout is not None
        assert frame.output.matte.data == alone.matte.data and frame.output.cutout.data == alone.cutout.data
        assert (frame.output.width, frame.output.height) == SIZE and frame.output.recipe == "u2netp"
        assert set(frame.output.timing_ms) >= {"decode", "model", "encode"}
        mattes.add(frame.output.matte.data)
    assert len(mattes) == len(frames)  # the frames' mattes differ: the order check means something


def test_encoded_and_rgba_frames(ai: AiClient, frames: list[npt.NDArray[np.uint8]]) -> None:
    rgba = np.dstack([frames[0], np.tile(np.linspace(0, 255, SIZE[0], dtype=np.uint8), (SIZE[1], 1))])
    sent: list[npt.NDArray[np.uint8] | bytes] = [_png(frames[1]), rgba, _png(rgba)]
    got = list(ai.remove_background_frames(sent, outputs="cutout"))
    expected = [ai.remove_background(_png(p), outputs="cutout") for p in (frames[1], rgba, rgba)]
    assert [g.output.cutout.data for g in got if g.output.cutout] == [e.cutout.data for e in expected if e.cutout]
    alpha = np.asarray(Image.open(io.BytesIO(got[1].output.cutout.data)))[:, :, 3]  # type: ignore[union-attr]
    assert (
        alpha[:, 0].max() == 0 < alpha[:, -40:].max()
    )  # the frame's own alpha (0 in its first column) multiplies the matte's


def test_raw_frames_are_the_png_frames_pixels(ai: AiClient, frames: list[npt.NDArray[np.uint8]]) -> None:
    """A stream's outputs asked raw (no PNG made per frame nor decoded here) are the PNGs' pixels."""
    raw = list(ai.remove_background_frames(iter(frames[:3]), outputs="matte,cutout", format="raw"))
    png = list(ai.remove_background_frames(iter(frames[:3]), outputs="matte,cutout"))
    for ours, theirs in zip(raw, png, strict=True):
        assert ours.output.cutout is not None and theirs.output.cutout is not None
        assert ours.output.matte is not None and theirs.output.matte is not None
        assert ours.output.cutout.format == "raw" and ours.output.cutout.shape == (SIZE[1], SIZE[0], 4)
        assert np.array_equal(ours.output.cutout.array(), theirs.output.cutout.array())
        assert np.array_equal(ours.output.matte.array(), theirs.output.matte.array())


def test_a_stream_that_found_its_server_gone_is_tried_again_and_loses_no_frame(
    server: servers.Process, ai: AiClient, frames: list[npt.NDArray[np.uint8]], tmp_path: Path
) -> None:
    """The SDK's stream to a server it reached before, stopped since: the try that got no answer
    took no frame from the app's iterator, the next try (once the server is back) starts afresh,
    and every frame is answered once, in order, as remove_background answers it."""
    later = servers.embedded(Path(server.env["CRAFTAI_STORE"]), tmp_path, dict(server.env))
    pulled: list[int] = []

    def source() -> Iterator[npt.NDArray[np.uint8]]:
        for index, frame in enumerate(frames[:3]):
            pulled.append(index)
            yield frame

    with (
        AiClient(app_id="frames-tests", target=later.address, retries=Retries(attempts=3, wait_seconds=120)) as late,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        late.runtime()  # reached once: a server that is gone later is worth waiting for
        assert later.stop() == 0
        stream = pool.submit(lambda: list(late.remove_background_frames(source(), outputs="matte")))
        time.sleep(1.0)
        assert not stream.done() and pulled == []  # waiting for the server, nothing taken
        with servers.running(later.restart()):
            got = stream.result(timeout=120)
    assert pulled == [0, 1, 2] and [frame.index for frame in got] == [0, 1, 2]
    expected = [ai.remove_background(_png(frame), outputs="matte").matte for frame in frames[:3]]
    assert [frame.output.matte for frame in got] == expected


def test_frames_are_read_only_as_fast_as_they_are_answered(ai: AiClient, frames: list[npt.NDArray[np.uint8]]) -> None:
    pulled = 0

    def source() -> Iterator[npt.NDArray[np.uint8]]:
        nonlocal pulled
        for index in range(24):
            pulled += 1
            yield frames[index % len(frames)]

    ahead = []
    for frame in ai.remove_background_frames(source(), outputs="matte", in_flight=2):
        ahead.append(pulled - frame.index - 1)
        time.sleep(0.05)  # a slow reader: frames must not pile up on the server meanwhile
    assert len(ahead) == 24
    # in flight on the server, plus what gRPC's windows hold (a frame is 90 KB: a few at most)
    assert max(ahead) <= 2 + 2, ahead  # in flight there, and AHEAD more at most


def test_a_frame_of_another_size_ends_the_stream_after_the_frames_before_it(
    ai: AiClient, frames: list[npt.NDArray[np.uint8]]
) -> None:
    other = np.zeros((SIZE[1] + 2, SIZE[0], 3), dtype=np.uint8)
    got: list[FrameOutput] = []
    with pytest.raises(CraftAiError) as raised:
        for frame in ai.remove_background_frames([frames[0], frames[1], other, frames[2]], outputs="matte"):
            got.append(frame)
    assert [frame.index for frame in got] == [0, 1]
    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and error.reason == Reason.BAD_PICTURE
    assert "frame 2 is 200x152" in str(error) and "200x150" in str(error) and "another stream" in str(error)


def test_bad_frames_and_options_in_plain_words(ai: AiClient, frames: list[npt.NDArray[np.uint8]]) -> None:
    with pytest.raises(CraftAiError) as raised:
        list(ai.remove_background_frames(frames[:2], outputs="matte", in_flight=MAX_IN_FLIGHT + 1))
    assert raised.value.reason == Reason.BAD_OPTIONS and f"between 1 and {MAX_IN_FLIGHT}" in str(raised.value)
    with pytest.raises(ValueError, match="in_flight is 0"):
        list(ai.remove_background_frames(frames[:1], in_flight=0))
    with pytest.raises(ValueError, match=r"frame 1 is ndarray of shape \(150, 200\)"):
        list(ai.remove_background_frames([frames[0], frames[0][:, :, 0]], outputs="matte"))
    with pytest.raises(CraftAiError) as raised:
        list(ai.remove_background_frames([frames[0], b"not a picture"], outputs="matte"))
    assert raised.value.reason == Reason.BAD_PICTURE and str(raised.value).startswith("frame 1: ")


def test_a_raw_frame_over_the_picture_limits_is_refused_naming_it(
    ai: AiClient, frames: list[npt.NDArray[np.uint8]]
) -> None:
    """A raw frame has no header to read: its stated size is held to the pictures' limits."""
    side = ai.runtime().limits.max_picture_side
    with pytest.raises(CraftAiError) as raised:
        list(ai.remove_background_frames([np.zeros((1, side + 1, 3), np.uint8)], outputs="matte"))
    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and error.reason == Reason.PICTURE_TOO_LARGE
    assert f"frame 0 is {side + 1}x1 pixels; the limits are" in str(error), str(error)
    assert f"{side:,} pixels on the longest side" in str(error)


def test_the_apps_own_error_is_raised_as_itself(ai: AiClient, frames: list[npt.NDArray[np.uint8]]) -> None:
    def failing() -> Iterator[npt.NDArray[np.uint8]]:
        yield frames[0]
        raise RuntimeError("the camera went away")

    with pytest.raises(RuntimeError, match="the camera went away"):
        list(ai.remove_background_frames(failing(), outputs="matte"))


def test_raw_frames_too_large_for_a_message_are_refused_at_the_first_frame(ai: AiClient) -> None:
    """Every frame has the first one's size, so raw outputs that cannot fit one message are refused
    from its header, before any frame is matted: nothing answered, the frame and the limit named."""
    big = io.BytesIO()
    Image.new("RGB", (4100, 4100), (90, 90, 90)).save(big, format="PNG")
    got: list[FrameOutput] = []
    with pytest.raises(CraftAiError) as raised:
        got.extend(ai.remove_background_frames([big.getvalue(), big.getvalue()], outputs="cutout", format="raw"))
    error = raised.value
    assert got == [] and (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.LIMIT_REACHED)
    assert error.message.startswith("frame 0: the raw cutout of frame 0 (4100x4100) come to 67,240,000 bytes")
    assert "(CRAFTAI_MAX_MESSAGE_BYTES)" in error.message


def test_the_start_comes_first_and_a_silent_caller_is_ended(server: servers.Process) -> None:
    with loopback_channel(server.address) as channel:
        stub = infer_pb2_grpc.InferServiceStub(channel)
        metadata = servers.app_metadata()
        frame = infer_pb2.MatteFramesRequest(
            frame=infer_pb2.Frame(data=b"\x00" * 12, width=2, height=2, encoding=infer_pb2.FRAME_ENCODING_RGB)
        )
        with pytest.raises(grpc.RpcError) as raw:
            list(stub.MatteFrames(iter([frame]), metadata=metadata, timeout=30))
        assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "first message of a frame stream is its start" in str(raw.value.details())

        start = infer_pb2.MatteFramesRequest(start=infer_pb2.MatteFramesStart())
        start.start.matte.outputs.add(kind=infer_pb2.MATTE_OUTPUT_KIND_MATTE)

        def silent() -> Iterator[infer_pb2.MatteFramesRequest]:
            yield start
            yield frame
            time.sleep(IDLE * 3)

        started = time.monotonic()
        events = stub.MatteFrames(silent(), metadata=metadata, timeout=60)
        answered = []
        with pytest.raises(grpc.RpcError) as raw:
            for event in events:
                answered.append(event.WhichOneof("event"))
        assert raw.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "no message came for 3 s" in str(raw.value.details()) and "frame 1" in str(raw.value.details())
        assert "frame" in answered and time.monotonic() - started < IDLE * 3  # ended by the server, not the caller


def test_asyncio_frames_are_the_blocking_clients(server: servers.Process, frames: list[npt.NDArray[np.uint8]]) -> None:
    def mattes(got: list[FrameOutput]) -> list[bytes]:
        return [f.output.matte.data for f in got if f.output.matte is not None]

    async def both() -> tuple[list[FrameOutput], list[FrameOutput]]:
        async def source() -> AsyncIterator[npt.NDArray[np.uint8]]:
            for pixels in frames[:3]:
                yield pixels

        async with AsyncAiClient(app_id="frames-tests", target=server.address) as ai:
            from_async = [f async for f in ai.remove_background_frames(source(), outputs="matte")]
            from_list = [f async for f in ai.remove_background_frames(frames[:3], outputs="matte")]
        return from_async, from_list

    from_async, from_list = asyncio.run(both())
    with AiClient(app_id="frames-tests", target=server.address) as ai:
        blocking = list(ai.remove_background_frames(frames[:3], outputs="matte"))
    assert mattes(from_async) == mattes(from_list) == mattes(blocking) and len(mattes(blocking)) == 3


def test_stabilize_steadies_what_is_still_and_leaves_what_moves(ai: AiClient, clip: clips.Clip) -> None:
    with VideoReader(clip.path) as reader:
        pictures = list(reader.frames())  # H.264's noise on a still background: the network's matte flickers

    def grey(data: bytes) -> npt.NDArray[np.uint8]:
        return np.asarray(Image.open(io.BytesIO(data)))

    plain = [
        grey(f.output.matte.data) for f in ai.remove_background_frames(pictures, outputs="matte") if f.output.matte
    ]
    answers = list(ai.remove_background_frames(pictures, outputs="matte,cutout", stabilize=0.8))
    steady = [grey(f.output.matte.data) for f in answers if f.output.matte]
    cutouts = [grey(f.output.cutout.data) for f in answers if f.output.cutout]
    assert len(plain) == len(steady) == len(cutouts) == clip.frames
    assert all(np.array_equal(c[:, :, 3], m) for c, m in zip(cutouts, steady, strict=True))  # made from it
    assert np.array_equal(steady[0], plain[0]) and "stabilize" in answers[1].output.timing_ms
    for index in range(1, clip.frames):
        moved = ~matte_temporal.still(pictures[index], pictures[index - 1])
        assert moved.any() and np.array_equal(steady[index][moved], plain[index][moved])
    before, after = matte_temporal.flicker(plain, pictures), matte_temporal.flicker(steady, pictures)
    print(f"flicker on still pixels: {before:.3f} levels a frame, stabilized {after:.3f}")
    assert before > 0 and after < before * 0.6
    with pytest.raises(ValueError, match="stabilize is 1"):
        list(ai.remove_background_frames(pictures[:1], stabilize=1.0))


# ------------------------------------------------------------------------------------------------
# the command: a video file through one frame stream


def _craftai(server: servers.Process, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAFTAI_ADDRESS": server.address}
    return subprocess.run(
        [str(servers.BIN / "craftai"), *args], check=False, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> clips.Clip:
    """A moving subject over a still background, with sound (made, never downloaded)."""
    return clips.moving_subject(tmp_path_factory.mktemp("clip") / "clip.mp4", size=(160, 120), frames=12, fps=12)


def _decoded(path: Path) -> list[npt.NDArray[np.uint8]]:
    """Every frame of a video as RGBA where it has alpha (VP9's alpha is read by libvpx: FFmpeg's own
    decoder drops it), else RGB."""
    import av

    found: list[npt.NDArray[np.uint8]] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.codec_context.name != "vp9":
            for frame in container.decode(stream):
                found.append(np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8))
            return found
        decoder = av.CodecContext.create("libvpx-vp9", "r")
        for packet in container.demux(stream):
            for frame in decoder.decode(packet):
                found.append(np.asarray(frame.to_ndarray(format="rgba"), dtype=np.uint8))
    return found


def _audio_seconds(path: Path) -> float:
    import av

    with av.open(str(path)) as container:
        if not container.streams.audio:
            return 0.0
        return float(container.duration or 0) / 1_000_000


def test_a_video_becomes_png_frames_equal_to_the_sdks(
    server: servers.Process, ai: AiClient, clip: clips.Clip, tmp_path: Path
) -> None:
    done = _craftai(server, "remove-background", str(clip.path), "-o", str(tmp_path / "frames"))
    assert done.returncode == 0, done.stderr
    assert "12 frames" in done.stdout and "u2netp" in done.stdout
    written = sorted((tmp_path / "frames").glob("frame_*.png"))
    assert len(written) == clip.frames
    with VideoReader(clip.path) as reader:
        expected = [f.output.cutout for f in ai.remove_background_frames(reader.frames(), outputs="cutout")]
    for path, cutout in zip(written, expected, strict=True):
        assert cutout is not None
        got = np.asarray(Image.open(path).convert("RGBA"))
        assert np.array_equal(got, np.asarray(Image.open(io.BytesIO(cutout.data)).convert("RGBA")))


def test_a_video_keeps_its_transparency_and_sound_in_webm_and_its_composite_in_mp4(
    server: servers.Process, ai: AiClient, clip: clips.Clip, tmp_path: Path
) -> None:
    with VideoReader(clip.path) as reader:
        frames = list(reader.frames())
    mattes = [
        np.asarray(Image.open(io.BytesIO(f.output.matte.data)))
        for f in ai.remove_background_frames(frames, outputs="matte")
        if f.output.matte
    ]
    assert len({m.tobytes() for m in mattes}) == clip.frames  # the subject moves: every matte differs

    webm = tmp_path / "out.webm"
    done = _craftai(server, "remove-background", str(clip.path), "-o", str(webm))
    assert done.returncode == 0, done.stderr
    alphas = [frame[:, :, 3] for frame in _decoded(webm)]
    assert len(alphas) == clip.frames
    for alpha, matte in zip(alphas, mattes, strict=True):  # VP9's alpha is lossy: near the matte, not equal
        assert np.abs(alpha.astype(np.int16) - matte).mean() < 4
    assert abs(_audio_seconds(webm) - clip.duration_s) < 0.2

    mp4 = tmp_path / "out.mp4"
    done = _craftai(server, "remove-background", str(clip.path), "-o", str(mp4), "--bg-color", "#2040c0")
    assert done.returncode == 0, done.stderr
    composites = _decoded(mp4)
    assert len(composites) == clip.frames and composites[0].shape == (120, 160, 3)
    background = np.array([0x20, 0x40, 0xC0])
    for picture, matte in zip(composites, mattes, strict=True):  # where the matte is 0, the colour (H.264: near)
        assert np.abs(picture[matte == 0].astype(np.int16) - background).mean() < 12
    assert abs(_audio_seconds(mp4) - clip.duration_s) < 0.2


def test_a_damaged_video_leaves_no_file_and_says_where_it_stopped(
    server: servers.Process, clip: clips.Clip, tmp_path: Path
) -> None:
    damaged = clips.truncated_copy(clip.path, tmp_path / "damaged.mp4", keep=0.5)
    done = _craftai(server, "remove-background", str(damaged), "-o", str(tmp_path / "out.webm"))
    assert done.returncode == 1 and re.search(r"frame \d+", done.stderr), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.mp4"]  # no output, no temporary

    refused = _craftai(
        server, "remove-background", str(clip.path), "-o", str(tmp_path / "out.mp4"), "--outputs", "cutout"
    )
    assert refused.returncode == 2 and "no transparency" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.mp4"]
    two = _craftai(
        server, "remove-background", str(clip.path), "-o", str(tmp_path / "x.webm"), "--outputs", "matte,cutout"
    )
    assert two.returncode == 2 and "a video holds one output" in two.stderr
    mixed = _craftai(server, "remove-background", str(clip.path), str(damaged), "-o", str(tmp_path / "out"))
    assert mixed.returncode == 2 and "give a video alone" in mixed.stderr
