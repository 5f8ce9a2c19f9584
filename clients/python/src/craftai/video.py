"""Video files in and out, with PyAV (the `video` extra): frames as numpy arrays, no gRPC here.

`VideoReader` yields a video's frames as RGB arrays; `VideoWriter` writes RGB or RGBA frames to a
file whose suffix picks the kind (see `output_kind`), keeps the input's sound where the kind can
carry it, and only puts the result in place when everything was written: a failed run leaves no
half-written output and no earlier output damaged. Nothing else in the SDK imports this module at
import time, so `craftai` works without PyAV.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import av
import numpy as np
from av.audio.stream import AudioStream

from craftai.video_kinds import OUTPUT_SUFFIXES, VIDEO_SUFFIXES, OutputKind, VideoError, is_video, output_kind

if TYPE_CHECKING:
    from av.container import InputContainer, OutputContainer
    from av.packet import Packet
    from av.video.codeccontext import VideoCodecContext
    from av.video.stream import VideoStream

__all__ = [
    "OUTPUT_SUFFIXES",
    "VIDEO_SUFFIXES",
    "OutputKind",
    "VideoError",
    "VideoInfo",
    "VideoReader",
    "VideoWriter",
    "is_video",
    "output_kind",
]

# Audio codecs each container takes as they are (packets copied, no quality lost); others are re-encoded.
_COPYABLE_AUDIO: dict[OutputKind, frozenset[str]] = {
    "webm": frozenset({"opus", "vorbis"}),
    # Opus and FLAC fit in MP4 too, but many players of .mp4 files don't play them.
    "mp4": frozenset({"aac", "mp3", "alac", "ac3", "eac3"}),
    "mov": frozenset({"aac", "mp3", "alac", "pcm_s16le", "pcm_s24le", "pcm_f32le", "ac3", "eac3"}),
}
_AUDIO_ENCODER: dict[OutputKind, str] = {"webm": "libopus", "mp4": "aac", "mov": "aac"}
_FORMAT: dict[OutputKind, str] = {"webm": "webm", "mov": "mov", "mp4": "mp4"}
# BT.709, the matrix of HD video: RGB is converted with it and the stream says so, so players and
# readers turn it back into the same colours.
_BT709 = 1
_LIMITED_RANGE = 1


@dataclass(frozen=True)
class VideoInfo:
    """What a video is: its size, frame rate, length and whether it has sound.

    `frames` is the container's own count when it has one (`frames_exact`), else an estimate from the
    duration and the frame rate (WebM and MKV keep no count), or None when neither is known.
    """

    width: int
    height: int
    fps: Fraction
    frames: int | None
    duration_s: float | None
    has_audio: bool
    frames_exact: bool = False


class VideoReader:
    """A video file's frames as (H, W, 3) uint8 RGB arrays, in display order.

    Rotation metadata (phones' portrait videos) is ignored: frames come as they are stored. Frames
    are converted to RGB with the colour matrix the file declares. Opening checks that the file is a
    video with a video stream; damage met while reading raises VideoError with the frame index.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise VideoError(f"{self.path}: no such file: check the path")
        try:
            container = av.open(str(self.path), "r")
        except av.FFmpegError as error:
            raise VideoError(
                f"{self.path} can't be read as a video ({_reason(error)}): check it is a whole video file "
                "(.mp4, .mov, .webm, .mkv, .avi)"
            ) from error
        try:
            if container.format.name.endswith("_pipe") or container.format.name == "image2":
                raise VideoError(f"{self.path} is a still picture, not a video: pass it as a picture")
            if not container.streams.video:
                raise VideoError(f"{self.path} has no video stream (only sound?): give a file with pictures")
            self._stream: VideoStream = container.streams.video[0]
            self._stream.thread_type = "AUTO"
            self.info = _info(container, self._stream, self.path)
        except BaseException:
            container.close()
            raise
        self._container: InputContainer = container
        self._started = False

    def frames(self) -> Iterator[np.ndarray]:
        """Decode the frames in order; once per reader (open another to read again)."""
        if self._started:
            raise RuntimeError("VideoReader.frames() reads the video once: open a new VideoReader to read it again")
        self._started = True
        index = 0
        reached: float | None = None
        try:
            for frame in self._container.decode(self._stream):
                if frame.time is not None:
                    reached = frame.time
                yield frame.to_ndarray(format="rgb24")
                index += 1
        except av.FFmpegError as error:
            raise VideoError(
                f"{self.path} is damaged: decoding failed at frame {index} (counting from 0) ({_reason(error)}); "
                "repair or re-export the video"
            ) from error
        self._check_complete(index, reached)

    def _check_complete(self, count: int, reached: float | None) -> None:
        """A file cut short decodes without an error: compare where the frames stopped with the stated length."""
        stream = self._stream
        if count == 0:
            raise VideoError(f"{self.path} has no frame that can be decoded: repair or re-export the video")
        length = _stream_duration(stream)
        if reached is None or length is None:
            return
        start = float((stream.start_time or 0) * stream.time_base) if stream.time_base is not None else 0.0
        step = 1 / float(self.info.fps)
        stopped = reached + step - start
        if stopped < length - max(3 * step, 0.01 * length):
            expected = f" of {self.info.frames}" if self.info.frames else ""
            raise VideoError(
                f"{self.path} ends early, at frame {count}{expected} (counting from 0): the pictures stop at "
                f"{stopped:.2f} s of {length:.2f} s, so the file is cut short or damaged: repair or re-export it"
            )

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class VideoWriter:
    """Frames to a video file (or a folder of PNGs), put in place only when all went well.

    Written under a temporary name beside `path` (`.NAME.partial-XXXX.SUFFIX`, or a hidden folder
    for PNGs) and renamed onto `path` when the `with` block ends without an exception; otherwise the
    temporary is removed and `path`, if it existed, is left as it was. Frames go out at `info.fps`,
    one after the other (a variable frame rate input comes out at its average rate). The sound of
    `audio_from` is kept where the kind can carry it (not in PNGs): copied as it is when the
    container takes its codec, else re-encoded (Opus in .webm, AAC in .mp4 and .mov), and cut at
    the end of the last frame written.
    """

    def __init__(self, path: Path | str, info: VideoInfo, *, alpha: bool, audio_from: Path | None = None) -> None:
        self.path = Path(path)
        self.info = info
        self.alpha = alpha
        self.kind: OutputKind = output_kind(self.path, alpha=alpha, size=(info.width, info.height))
        self.count = 0
        self._done = False
        self._container: OutputContainer | None = None
        self._video: VideoStream | None = None
        self._png: VideoCodecContext | None = None
        self._audio: _Audio | None = None
        token = secrets.token_hex(4)
        parent = self.path.parent
        if self.kind == "png":
            self._temp = parent / f".{self.path.name}.partial-{token}"
            self._temp.mkdir(parents=True)
            self._png = _png_encoder(info, alpha)
            return
        self._temp = parent / f".{self.path.name}.partial-{token}{self.path.suffix}"
        try:
            options = {"movflags": "+faststart"} if self.kind in ("mp4", "mov") else {}
            self._container = av.open(str(self._temp), "w", format=_FORMAT[self.kind], options=options)
            self._video = _video_stream(self._container, self.kind, info, alpha)
            if audio_from is not None:
                self._audio = _Audio.open(audio_from, self._container, self.kind)
        except av.FFmpegError as error:
            self._abort()
            raise VideoError(f"can't start writing {self.path} ({_reason(error)})") from error
        except BaseException:
            self._abort()
            raise

    @property
    def has_audio(self) -> bool:
        """Whether the output carries sound (audio_from had some and the kind can hold it)."""
        return self._audio is not None

    def write(self, frame: np.ndarray) -> None:
        """Add the next frame: (H, W, 4) RGBA uint8 when writing alpha, else (H, W, 3) RGB uint8."""
        if self._done:
            raise RuntimeError("VideoWriter is closed")
        channels = 4 if self.alpha else 3
        expected = (self.info.height, self.info.width, channels)
        if frame.dtype != np.uint8 or frame.shape != expected:
            raise ValueError(f"frame must be {expected} uint8, got {frame.shape} {frame.dtype}")
        picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgba" if self.alpha else "rgb24")
        index = self.count
        try:
            if self._png is not None:
                packets = self._png.encode(picture)
                data = b"".join(bytes(packet) for packet in packets)
                (self._temp / f"frame_{index + 1:06d}.png").write_bytes(data)
            else:
                assert self._container is not None and self._video is not None
                converted = picture.reformat(
                    format=self._video.codec_context.pix_fmt, dst_colorspace=_BT709, dst_color_range=_LIMITED_RANGE
                )
                converted.pts = index
                converted.time_base = 1 / self.info.fps
                self._container.mux(self._video.encode(converted))
                if self._audio is not None:
                    self._audio.pump(float((index + 1) / self.info.fps), frame=index)
        except av.FFmpegError as error:
            raise VideoError(f"writing frame {index} of {self.path} failed ({_reason(error)})") from error
        self.count += 1

    def close(self) -> None:
        """Finish the file and put it in place (what leaving the `with` block without an error does)."""
        if self._done:
            return
        if self.count == 0:
            self._abort()
            raise VideoError(f"no frame was written, so {self.path} was not made")
        try:
            if self._container is not None and self._video is not None:
                self._container.mux(self._video.encode(None))
                if self._audio is not None:
                    self._audio.finish(float(self.count / self.info.fps), frame=self.count - 1)
                self._container.close()
                self._container = None
                os.replace(self._temp, self.path)
            else:
                self._place_sequence()
        except av.FFmpegError as error:
            self._abort()
            raise VideoError(f"finishing {self.path} failed ({_reason(error)})") from error
        except BaseException:
            self._abort()
            raise
        self._done = True

    def _place_sequence(self) -> None:
        """Rename the finished folder onto `path`, or move its frames into an existing folder.

        An existing folder keeps its other files; frame_*.png files an earlier, longer run left there
        are removed so the folder holds exactly this video.
        """
        if not self.path.exists():
            os.replace(self._temp, self.path)
            return
        for index in range(self.count):
            name = f"frame_{index + 1:06d}.png"
            os.replace(self._temp / name, self.path / name)
        for stale in self.path.glob("frame_*.png"):
            number = stale.stem.removeprefix("frame_")
            if number.isdigit() and int(number) > self.count:
                stale.unlink()
        self._temp.rmdir()

    def _abort(self) -> None:
        """Drop everything written so far; `path` is not touched."""
        self._done = True
        if self._audio is not None:
            self._audio.close()
            self._audio = None
        if self._container is not None:
            with contextlib.suppress(av.FFmpegError):
                self._container.close()
            self._container = None
        if self._temp.is_dir():
            shutil.rmtree(self._temp, ignore_errors=True)
        else:
            self._temp.unlink(missing_ok=True)

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._abort()


class _Audio:
    """The sound of a source file going into the output alongside the frames, copied or re-encoded."""

    def __init__(
        self,
        source: InputContainer,
        stream: AudioStream,
        output: OutputContainer,
        target: AudioStream,
        *,
        copy: bool,
        shift: float,
    ) -> None:
        self._source = source
        self._stream = stream
        self._output = output
        self._target = target
        self._copy = copy
        # The source video's start: sound is placed relative to the first frame, as in the source.
        self._shift = shift
        self._packets = source.demux(stream)
        self._pending: Packet[AudioStream] | None = None
        self._ended = False

    @classmethod
    def open(cls, path: Path, output: OutputContainer, kind: OutputKind) -> _Audio | None:
        """The source's first audio stream set up for `output`, or None when it has no sound."""
        try:
            source = av.open(str(path), "r")
        except av.FFmpegError as error:
            raise VideoError(f"can't read the sound of {path} ({_reason(error)})") from error
        if not source.streams.audio:
            source.close()
            return None
        stream = source.streams.audio[0]
        shift = 0.0
        if source.streams.video:
            video = source.streams.video[0]
            if video.start_time is not None and video.time_base is not None:
                shift = float(video.start_time * video.time_base)
        copy = stream.codec_context.name in _COPYABLE_AUDIO[kind]
        if copy:
            target = output.add_stream_from_template(stream)
        else:
            encoder = _AUDIO_ENCODER[kind]
            rate = 48000 if encoder == "libopus" else stream.codec_context.sample_rate or 48000
            layout = "mono" if stream.codec_context.layout.nb_channels == 1 else "stereo"
            added = output.add_stream(encoder, rate=rate, layout=layout)
            assert isinstance(added, AudioStream)
            target = added
        return cls(source, stream, output, target, copy=copy, shift=shift)

    def pump(self, until: float, *, frame: int) -> None:
        """Pass on the sound that starts before `until` seconds of the output (written with `frame`)."""
        try:
            while not self._ended:
                packet = self._pending or self._next()
                self._pending = None
                if packet is None:
                    self._ended = True
                    return
                start = self._start(packet)
                if start >= until:
                    self._pending = packet
                    return
                self._send(packet)
        except av.FFmpegError as error:
            raise VideoError(
                f"the sound of {self._source.name} is damaged near frame {frame} ({_reason(error)}): repair or "
                "re-export the video, or leave its sound out"
            ) from error

    def finish(self, end: float, *, frame: int) -> None:
        """Pass on the sound up to `end` (the last frame's end), flush the encoder, close the source."""
        self.pump(end, frame=frame)
        if not self._copy:
            self._output.mux(self._target.encode(None))
        self.close()

    def close(self) -> None:
        self._source.close()

    def _next(self) -> Packet[AudioStream] | None:
        for packet in self._packets:
            if packet.size == 0 or packet.pts is None:
                continue
            return packet
        return None

    def _start(self, packet: Packet[AudioStream]) -> float:
        assert packet.pts is not None and packet.time_base is not None
        return float(packet.pts * packet.time_base) - self._shift

    def _send(self, packet: Packet[AudioStream]) -> None:
        assert packet.time_base is not None
        offset = round(self._shift / packet.time_base)
        if self._copy:
            if packet.pts is not None:
                packet.pts -= offset
            if packet.dts is not None:
                packet.dts -= offset
            if packet.pts is not None and packet.pts < 0 and packet.duration and packet.pts + packet.duration <= 0:
                return
            packet.stream = self._target
            self._output.mux(packet)
            return
        for frame in packet.decode():
            if frame.pts is not None:
                frame.pts -= offset
            if frame.pts is not None and frame.pts < 0:
                continue
            self._output.mux(self._target.encode(frame))


def _info(container: InputContainer, stream: VideoStream, path: Path) -> VideoInfo:
    """The VideoInfo of an open input, from what the container states."""
    width, height = stream.codec_context.width, stream.codec_context.height
    if not width or not height:
        raise VideoError(f"{path}: the video stream has no picture size: repair or re-export the video")
    fps = _rate(stream)
    if fps is None:
        raise VideoError(f"{path}: the video states no frame rate: re-export it with a constant frame rate")
    duration = _stream_duration(stream)
    if duration is None and container.duration is not None:
        duration = container.duration / av.time_base
    exact = bool(stream.frames)
    frames = stream.frames if exact else (round(duration * fps) if duration else None)
    return VideoInfo(
        width=width,
        height=height,
        fps=fps,
        frames=frames,
        duration_s=duration,
        has_audio=bool(container.streams.audio),
        frames_exact=exact,
    )


def _stream_duration(stream: VideoStream) -> float | None:
    """The video stream's own length in seconds (not the sound's), when the file states it.

    MP4 and MOV state it in the stream; Matroska files written by FFmpeg in a DURATION tag.
    """
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    tag = stream.metadata.get("DURATION") or stream.metadata.get("duration")
    if not tag:
        return None
    try:
        hours, minutes, seconds = tag.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        return None


def _rate(stream: VideoStream) -> Fraction | None:
    """The frame rate: the average, or the stated base rate when the average is just a rounding of it."""
    average, guessed = stream.average_rate, stream.guessed_rate
    if average and guessed and abs(average - guessed) <= guessed * Fraction(1, 500):
        return Fraction(guessed)
    rate = average or guessed or stream.base_rate
    return Fraction(rate) if rate else None


def _video_stream(container: OutputContainer, kind: OutputKind, info: VideoInfo, alpha: bool) -> VideoStream:
    """The video stream of one output kind, with its encoder's settings."""
    if kind == "webm":
        # Constant quality; row-mt and cpu-used 4 keep VP9 from being the slow part.
        options = {"crf": "30", "b": "0", "deadline": "good", "cpu-used": "4", "row-mt": "1"}
        stream = container.add_stream("libvpx-vp9", rate=info.fps, options=options)
        stream.pix_fmt = "yuva420p" if alpha else "yuv420p"
    elif kind == "mov":
        stream = container.add_stream(
            "prores_ks", rate=info.fps, options={"profile": "4444" if alpha else "hq", "vendor": "apl0"}
        )
        stream.pix_fmt = "yuva444p10le" if alpha else "yuv422p10le"
        # prores_ks with alpha is not deterministic in this FFmpeg: now and then a run of 8 alpha
        # pixels comes out 128 off, more often with slice threads; one thread makes it rarer.
        stream.codec_context.thread_count = 1
    else:
        stream = container.add_stream("libx264", rate=info.fps, options={"preset": "medium", "crf": "18"})
        stream.pix_fmt = "yuv420p"
    stream.width, stream.height = info.width, info.height
    stream.time_base = 1 / info.fps
    context = stream.codec_context
    context.colorspace = context.color_primaries = context.color_trc = _BT709
    context.color_range = _LIMITED_RANGE
    return stream


def _png_encoder(info: VideoInfo, alpha: bool) -> VideoCodecContext:
    """FFmpeg's PNG encoder (lossless, RGBA or RGB) for the frames of a sequence."""
    from av.video.codeccontext import VideoCodecContext

    context = av.CodecContext.create("png", "w")
    assert isinstance(context, VideoCodecContext)
    context.width, context.height = info.width, info.height
    context.pix_fmt = "rgba" if alpha else "rgb24"
    context.time_base = 1 / info.fps
    return context


def _reason(error: av.FFmpegError) -> str:
    """FFmpeg's words for an error, without the errno prefix."""
    return error.strerror or str(error)
