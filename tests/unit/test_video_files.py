"""craftai.video with real files: every output kind written and read back with PyAV, sound kept or
left out, damaged inputs and failed runs leaving nothing half-written behind.

The clips are made by craftai_dev.clips (small, so the module stays quick); what was written is
read back with PyAV directly, not with VideoReader, so a reader fault can't hide a writer fault.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av", reason="PyAV is the `video` extra of the SDK (pip install 'craftai[video]')")

from craftai.video import (  # noqa: E402
    VideoError,
    VideoInfo,
    VideoReader,
    VideoWriter,
    is_video,
    output_kind,
)
from craftai_dev.clips import Clip, moving_subject, truncated_copy  # noqa: E402

SIZE = (160, 120)
FRAMES = 12
FPS = 12


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Clip]:
    """The inputs: H.264 + AAC in .mp4, VP9 + Opus in .webm, and an .mp4 without sound."""
    folder = tmp_path_factory.mktemp("clips")
    return {
        "mp4": moving_subject(folder / "cat.mp4", size=SIZE, frames=FRAMES, fps=FPS),
        "webm": moving_subject(folder / "cat.webm", size=SIZE, frames=FRAMES, fps=FPS),
        "silent": moving_subject(folder / "silent.mp4", size=SIZE, frames=FRAMES, fps=FPS, audio=False),
    }


def _info(width: int = SIZE[0], height: int = SIZE[1]) -> VideoInfo:
    return VideoInfo(
        width=width, height=height, fps=Fraction(FPS), frames=FRAMES, duration_s=FRAMES / FPS, has_audio=False
    )


def _rgba(index: int, width: int = SIZE[0], height: int = SIZE[1]) -> np.ndarray:
    """A frame whose alpha has a clear (0) third, an opaque (255) third and a left-to-right gradient third."""
    frame = np.zeros((height, width, 4), np.uint8)
    frame[..., 0] = (np.arange(width) * 255 // width)[None, :]
    frame[..., 1] = (np.arange(height) * 255 // height)[:, None]
    frame[..., 2] = 40 + 10 * index
    third = width // 3
    frame[:, third : 2 * third, 3] = 255
    frame[:, 2 * third :, 3] = np.linspace(0, 255, width - 2 * third).round().astype(np.uint8)[None, :]
    return frame


def _write(path: Path, frames: list[np.ndarray], *, alpha: bool, info: VideoInfo | None = None) -> None:
    with VideoWriter(path, info or _info(), alpha=alpha) as writer:
        for frame in frames:
            writer.write(frame)


Stated = tuple[str, Fraction | None, int, int]


def _decoded(path: Path, *, decoder: str | None = None, pixels: str = "rgba") -> tuple[list[np.ndarray], Stated]:
    """All frames of `path` as arrays (through the named decoder when given); the stream's codec, rate, size."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if decoder is None:
            frames = [frame.to_ndarray(format=pixels) for frame in container.decode(stream)]
        else:
            context = av.CodecContext.create(decoder, "r")
            frames = [
                frame.to_ndarray(format=pixels)
                for packet in container.demux(stream)
                for frame in context.decode(packet)
            ]
        return frames, (stream.codec_context.name, stream.average_rate, stream.width, stream.height)


def _audio(path: Path) -> tuple[str, float] | None:
    """(codec, seconds) of the file's first audio stream, or None."""
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        seconds = sum(
            float(packet.duration * packet.time_base) for packet in container.demux(stream) if packet.duration
        )
        return stream.codec_context.name, seconds


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if ".partial-" in path.name)


def test_reader_gives_the_clip_frames_in_order(clips: dict[str, Clip]) -> None:
    clip = clips["mp4"]
    with VideoReader(clip.path) as reader:
        info = reader.info
        frames = list(reader.frames())
    assert (info.width, info.height, info.fps, info.frames, info.frames_exact) == (*SIZE, Fraction(FPS), FRAMES, True)
    assert info.has_audio and info.duration_s == pytest.approx(FRAMES / FPS)
    assert len(frames) == FRAMES
    assert all(frame.shape == (SIZE[1], SIZE[0], 3) and frame.dtype == np.uint8 for frame in frames)
    # The subject moves right: the frame differs from the first where the subject was and now isn't.
    first, last = clip.matte(0) > 0, clip.matte(FRAMES - 1) > 0
    assert not (first & last).any()
    changed = np.abs(frames[0].astype(int) - frames[-1].astype(int)).sum(axis=2) > 40
    assert changed[first].mean() > 0.5 and changed[~(first | last)].mean() < 0.05


def test_webm_estimates_its_frame_count(clips: dict[str, Clip]) -> None:
    with VideoReader(clips["webm"].path) as reader:
        assert reader.info.frames == FRAMES and not reader.info.frames_exact
        assert sum(1 for _ in reader.frames()) == FRAMES


def test_webm_keeps_alpha_for_the_libvpx_decoder(tmp_path: Path) -> None:
    written = [_rgba(index) for index in range(FRAMES)]
    out = tmp_path / "cut.webm"
    _write(out, written, alpha=True)
    frames, (codec, rate, width, height) = _decoded(out, decoder="libvpx-vp9")
    assert (codec, rate, width, height, len(frames)) == ("vp9", Fraction(FPS), *SIZE, FRAMES)
    third = SIZE[0] // 3
    for got, sent in zip(frames, written, strict=True):
        alpha, expected = got[..., 3].astype(int), sent[..., 3].astype(int)
        assert (alpha[:, 2 : third - 2] <= 4).all()  # clear stays clear
        assert (alpha[:, third + 2 : 2 * third - 2] >= 251).all()  # opaque stays opaque
        assert np.abs(alpha[:, 2 * third + 2 :] - expected[:, 2 * third + 2 :]).mean() < 3  # the gradient
    # FFmpeg's own VP9 decoder (what a plain av.open decodes with) drops the alpha plane.
    plain, _ = _decoded(out)
    assert (plain[0][..., 3] == 255).all()


def test_mov_is_prores_4444_with_alpha_at_an_odd_size(tmp_path: Path) -> None:
    width, height = 161, 121
    written = [_rgba(index, width, height) for index in range(FRAMES)]
    out = tmp_path / "cut.mov"
    _write(out, written, alpha=True, info=_info(width, height))
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "prores" and stream.codec_context.pix_fmt.startswith("yuva444p")
        assert stream.frames == FRAMES and stream.average_rate == FPS
    frames, _ = _decoded(out)
    for got, sent in zip(frames, written, strict=True):
        assert got.shape == sent.shape
        # prores_ks now and then writes a run of 8 alpha pixels 128 off (FFmpeg's encoder, not this
        # module: it varies from run to run on the same frames); everything else is within 2.
        off = np.abs(got[..., 3].astype(int) - sent[..., 3]) > 2
        assert off.sum() <= 16
        assert np.abs(got[..., :3].astype(int) - sent[..., :3]).mean() < 2


@pytest.mark.parametrize(
    ("name", "codec", "pixels"), [("cut.mov", "prores", "yuv422p10le"), ("cut.mp4", "h264", "yuv420p")]
)
def test_opaque_kinds_round_trip(tmp_path: Path, name: str, codec: str, pixels: str) -> None:
    written = [_rgba(index)[..., :3].copy() for index in range(FRAMES)]
    out = tmp_path / name
    _write(out, written, alpha=False)
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == (codec, pixels)
        assert (stream.frames, stream.average_rate, stream.width, stream.height) == (FRAMES, FPS, *SIZE)
    # Read back through VideoReader: the colours come back (BT.709 both ways), the frames in order.
    with VideoReader(out) as reader:
        frames = list(reader.frames())
        assert not reader.info.has_audio
    assert len(frames) == FRAMES
    for got, sent in zip(frames, written, strict=True):
        assert np.abs(got.astype(int) - sent).mean() < 3


def test_webm_opaque_at_an_odd_size(tmp_path: Path) -> None:
    written = [_rgba(index, 161, 121)[..., :3].copy() for index in range(FRAMES)]
    out = tmp_path / "odd.webm"
    _write(out, written, alpha=False, info=_info(161, 121))
    frames, (_, rate, width, height) = _decoded(out, pixels="rgb24")
    assert (len(frames), rate, width, height) == (FRAMES, Fraction(FPS), 161, 121)
    assert np.abs(frames[5].astype(int) - written[5]).mean() < 4


def test_png_sequence_is_exact(tmp_path: Path) -> None:
    written = [_rgba(index) for index in range(FRAMES)]
    out = tmp_path / "frames"
    _write(out, written, alpha=True)
    names = sorted(path.name for path in out.iterdir())
    assert names == [f"frame_{index:06d}.png" for index in range(1, FRAMES + 1)]
    for name, sent in zip(names, written, strict=True):
        got, _ = _decoded(out / name)
        assert len(got) == 1 and np.array_equal(got[0], sent)
    assert _leftovers(tmp_path) == []


def test_png_sequence_into_an_existing_folder(tmp_path: Path) -> None:
    out = tmp_path / "frames.out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "frame_000099.png").write_bytes(b"an earlier, longer run")
    assert output_kind(out) == "png"
    _write(out, [_rgba(index)[..., :3].copy() for index in range(3)], alpha=False)
    assert sorted(path.name for path in out.iterdir()) == [*(f"frame_{i:06d}.png" for i in (1, 2, 3)), "notes.txt"]
    got, _ = _decoded(out / "frame_000002.png", pixels="rgb24")
    assert np.array_equal(got[0], _rgba(1)[..., :3])
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("source", "name", "codec"),
    [
        ("mp4", "out.mp4", "aac"),  # copied
        ("mp4", "out.mov", "aac"),  # copied
        ("mp4", "out.webm", "opus"),  # re-encoded: WebM has no AAC
        ("webm", "out.webm", "opus"),  # copied
        ("webm", "out.mp4", "aac"),  # re-encoded
    ],
)
def test_sound_is_kept(clips: dict[str, Clip], tmp_path: Path, source: str, name: str, codec: str) -> None:
    clip = clips[source]
    out = tmp_path / name
    with VideoReader(clip.path) as reader, VideoWriter(out, reader.info, alpha=False, audio_from=clip.path) as writer:
        assert writer.has_audio
        for frame in reader.frames():
            writer.write(frame)
    found = _audio(out)
    assert found is not None
    assert found[0] == codec
    assert found[1] == pytest.approx(clip.duration_s, abs=0.1)
    frames, _ = _decoded(out)
    assert len(frames) == FRAMES


def test_sound_left_out(clips: dict[str, Clip], tmp_path: Path) -> None:
    clip = clips["mp4"]
    frames = [_rgba(index)[..., :3].copy() for index in range(FRAMES)]
    cases = [
        (tmp_path / "asked.mp4", None),
        (tmp_path / "none.mp4", clips["silent"].path),
        (tmp_path / "png", clip.path),
    ]
    for out, source in cases:
        with VideoWriter(out, _info(), alpha=False, audio_from=source) as writer:
            assert not writer.has_audio
            for frame in frames:
                writer.write(frame)
    assert _audio(tmp_path / "asked.mp4") is None and _audio(tmp_path / "none.mp4") is None
    assert len(list((tmp_path / "png").iterdir())) == FRAMES


def test_sound_is_cut_at_the_last_frame(clips: dict[str, Clip], tmp_path: Path) -> None:
    clip = clips["mp4"]
    out = tmp_path / "half.mp4"
    with VideoReader(clip.path) as reader, VideoWriter(out, reader.info, alpha=False, audio_from=clip.path) as writer:
        for index, frame in enumerate(reader.frames()):
            if index == FRAMES // 2:
                break
            writer.write(frame)
    found = _audio(out)
    assert found is not None and found[1] == pytest.approx(0.5 * clip.duration_s, abs=0.1)


@pytest.mark.parametrize("keep", [0.3, 0.6])
def test_damaged_clip_names_the_frame_and_leaves_nothing(clips: dict[str, Clip], tmp_path: Path, keep: float) -> None:
    damaged = truncated_copy(clips["mp4"].path, tmp_path / "damaged.mp4", keep=keep)
    out = tmp_path / "out.webm"
    with (
        pytest.raises(VideoError, match=r"frame \d+") as raised,
        VideoReader(damaged) as reader,
        VideoWriter(out, reader.info, alpha=False, audio_from=damaged) as writer,
    ):
        for frame in reader.frames():
            writer.write(frame)
    assert "repair or re-export" in str(raised.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["damaged.mp4"]


def test_damaged_webm_is_noticed(clips: dict[str, Clip], tmp_path: Path) -> None:
    damaged = truncated_copy(clips["webm"].path, tmp_path / "damaged.webm", keep=0.5)
    with VideoReader(damaged) as reader, pytest.raises(VideoError, match=r"ends early, at frame \d+ of 12"):
        for _ in reader.frames():
            pass


@pytest.mark.parametrize("name", ["out.webm", "out.mov", "out.mp4", "frames"])
def test_a_failed_run_leaves_the_earlier_output(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    _write(out, [_rgba(0)[..., :3].copy()], alpha=False)
    before = {path.name: path.read_bytes() for path in out.iterdir()} if out.is_dir() else out.read_bytes()
    with pytest.raises(KeyboardInterrupt), VideoWriter(out, _info(), alpha=False) as writer:
        for index in range(4):
            writer.write(_rgba(index + 1)[..., :3].copy())
        raise KeyboardInterrupt
    after = {path.name: path.read_bytes() for path in out.iterdir()} if out.is_dir() else out.read_bytes()
    assert after == before
    assert _leftovers(tmp_path) == []


def test_alpha_into_mp4_is_refused_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "cut.mp4"
    with pytest.raises(VideoError, match=r"\.webm or \.mov"):
        output_kind(out, alpha=True)
    with pytest.raises(VideoError, match="composite"):
        VideoWriter(out, _info(), alpha=True)
    assert list(tmp_path.iterdir()) == []


def test_odd_sizes_into_mp4_are_refused(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"even width and height.*161x121"):
        output_kind(tmp_path / "cut.mp4", size=(161, 121))
    with pytest.raises(VideoError, match="even width"):
        VideoWriter(tmp_path / "cut.mp4", _info(161, 121), alpha=False)
    assert output_kind(tmp_path / "cut.webm", alpha=True, size=(161, 121)) == "webm"
    assert output_kind(tmp_path / "cut.mov", alpha=True, size=(161, 121)) == "mov"
    assert list(tmp_path.iterdir()) == []


def test_unknown_output_suffix(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"can't write \.gif"):
        output_kind(tmp_path / "cut.gif")
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(VideoError, match="is a file"):
        output_kind(tmp_path / "plain")


def test_wrong_frames_are_a_caller_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="uint8"), VideoWriter(tmp_path / "x.webm", _info(), alpha=True) as writer:
        writer.write(_rgba(0)[..., :3].copy())
    assert list(tmp_path.iterdir()) == []


def test_no_frames_no_file(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="no frame"), VideoWriter(tmp_path / "x.mp4", _info(), alpha=False):
        pass
    assert list(tmp_path.iterdir()) == []


def test_inputs_that_are_not_videos(tmp_path: Path) -> None:
    from craftai_dev.samples import photos

    text = tmp_path / "notes.mp4"
    text.write_text("not a video")
    with pytest.raises(VideoError, match="can't be read as a video"):
        VideoReader(text)
    with pytest.raises(VideoError, match="still picture"):
        VideoReader(photos()["chelsea.png"])
    with pytest.raises(VideoError, match="no such file"):
        VideoReader(tmp_path / "missing.mp4")
    sound = tmp_path / "sound.mp4"
    with av.open(str(sound), "w") as container:
        stream = container.add_stream("aac", rate=48000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="flt", layout="mono")
        frame.sample_rate, frame.pts = 48000, 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with pytest.raises(VideoError, match="no video stream"):
        VideoReader(sound)


def test_is_video() -> None:
    assert all(is_video(f"clip{suffix}") for suffix in (".mp4", ".MOV", ".webm", ".mkv", ".avi", ".m4v"))
    assert not any(is_video(name) for name in ("cat.png", "cat.jpg", "frames", "clip.gif"))


def test_clips_are_the_same_every_run(tmp_path: Path) -> None:
    one = moving_subject(tmp_path / "one.webm", size=SIZE, frames=4, fps=FPS)
    two = moving_subject(tmp_path / "two.webm", size=SIZE, frames=4, fps=FPS)
    assert one.path.read_bytes() == two.path.read_bytes()
    assert one.boxes == two.boxes and one.boxes[0][0] == 0 and one.boxes[-1][2] == SIZE[0]
