"""Small test videos, made here from the sample photos (never downloaded).

`moving_subject` writes a clip where an oval cut from one photo (the cat of chelsea.png) slides
across a still background made from another (coffee.png), with a sine tone as its sound: the
subject's box is known for every frame, so a background remover's output can be checked against
it. `truncated_copy` cuts a clip short in the middle of its data, for the tests of damaged inputs.

Made with PyAV (the SDK's `video` extra); the same arguments give the same frames on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from craftai_dev.samples import photos

if TYPE_CHECKING:
    from av.audio.stream import AudioStream
    from av.container import OutputContainer

Box = tuple[int, int, int, int]

# suffix -> (video codec, audio codec, container options): H.264 and AAC where a phone would put them,
# VP9 and Opus in WebM. The index of an MP4 or MOV goes first (faststart) so that a truncated copy
# still says how many frames the whole clip had; bitexact leaves out what changes from run to run.
_KINDS: dict[str, tuple[str, str, dict[str, str]]] = {
    ".mp4": ("libx264", "aac", {"movflags": "+faststart", "fflags": "+bitexact"}),
    ".m4v": ("libx264", "aac", {"movflags": "+faststart", "fflags": "+bitexact"}),
    ".mov": ("libx264", "aac", {"movflags": "+faststart", "fflags": "+bitexact"}),
    ".mkv": ("libx264", "aac", {"fflags": "+bitexact"}),
    ".webm": ("libvpx-vp9", "libopus", {"fflags": "+bitexact"}),
}
# Fast settings: the clips are inputs for tests, small and short.
_ENCODER_OPTIONS = {
    "libx264": {"preset": "veryfast", "crf": "20"},
    "libvpx-vp9": {"crf": "32", "b": "0", "deadline": "realtime", "cpu-used": "8"},
}
TONE_HZ = 440.0
AUDIO_RATE = 48000
# The subject's share of the clip's height, and where the oval sits in chelsea.png (the cat's head).
_SUBJECT_SHARE = 0.55
_SUBJECT_CROP = (120, 10, 330, 230)


@dataclass(frozen=True)
class Clip:
    """A made clip and what is known about it: the subject's box (left, top, right, bottom) per frame."""

    path: Path
    size: tuple[int, int]  # (width, height)
    fps: int
    frames: int
    boxes: tuple[Box, ...]
    has_audio: bool

    @property
    def duration_s(self) -> float:
        return self.frames / self.fps

    def matte(self, index: int) -> np.ndarray:
        """The subject's alpha at frame `index` as (H, W) uint8 (255 inside the oval), as it was drawn."""
        width, height = self.size
        return _oval(self.boxes[index], width, height)


def moving_subject(
    path: Path,
    *,
    size: tuple[int, int] = (320, 240),
    frames: int = 24,
    fps: int = 12,
    audio: bool = True,
    codec: str | None = None,
) -> Clip:
    """Write a clip of an oval cut from chelsea.png moving left to right over coffee.png.

    The container follows `path`'s suffix (.mp4, .m4v, .mov, .mkv: H.264 and AAC; .webm: VP9 and
    Opus); `codec` names another video encoder (e.g. "mpeg4"). Width and height must be even (the
    clip is yuv420p, as most cameras write). `audio` adds a 440 Hz tone as long as the video.
    """
    import av
    from av.audio.stream import AudioStream
    from av.video.stream import VideoStream

    width, height = size
    if width % 2 or height % 2 or width < 32 or height < 32:
        raise ValueError(f"clip size must be even and at least 32x32, got {width}x{height}")
    suffix = path.suffix.lower()
    if suffix not in _KINDS:
        raise ValueError(f"clips are written as {', '.join(_KINDS)}, not {suffix!r}")
    video_codec, audio_codec, options = _KINDS[suffix]
    background, subject = _pictures(width, height)
    boxes = tuple(_box(index, frames, (width, height), subject.shape[1]) for index in range(frames))
    rate = Fraction(fps)
    with av.open(str(path), "w", options=options) as container:
        # Written by this module, not by the library's version: the same bytes on every run.
        container.metadata["encoder"] = "craftai_dev.clips"
        name = codec or video_codec
        video = container.add_stream(name, rate=rate, options=_ENCODER_OPTIONS.get(name, {}))
        assert isinstance(video, VideoStream)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        # One thread, so the encoders' output does not depend on how the work was split.
        video.codec_context.thread_count = 1
        sound: AudioStream | None = None
        if audio:
            added = container.add_stream(audio_codec, rate=AUDIO_RATE, layout="mono")
            assert isinstance(added, AudioStream)
            added.codec_context.thread_count = 1
            sound = added
        for index, box in enumerate(boxes):
            picture = _compose(background, subject, box)
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts = index
            frame.time_base = 1 / rate
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        if sound is not None:
            _tone(container, sound, frames / fps)
    return Clip(path=path, size=(width, height), fps=fps, frames=frames, boxes=boxes, has_audio=audio)


def moving_frames(size: tuple[int, int], frames: int) -> list[np.ndarray]:
    """`moving_subject`'s frames as drawn, (H, W, 3) RGB, no codec between (and no PyAV needed):
    for benchmarks that send raw frames where PyAV is not installed."""
    width, height = size
    background, subject = _pictures(width, height)
    return [_compose(background, subject, _box(i, frames, size, subject.shape[1])) for i in range(frames)]


def truncated_copy(source: Path, target: Path, *, keep: float = 0.5) -> Path:
    """Copy the first `keep` share of `source`'s bytes to `target`: a file cut off in its middle.

    For an .mp4 or .mov made by `moving_subject`, the index (at the front) still lists every frame,
    so a reader finds the frames run out partway through.
    """
    data = source.read_bytes()
    target.write_bytes(data[: max(1, int(len(data) * keep))])
    return target


def _tone(container: OutputContainer, sound: AudioStream, seconds: float) -> None:
    """Encode `seconds` of a sine tone into the audio stream, in 1024-sample frames."""
    import av

    total = round(seconds * AUDIO_RATE)
    step = 1024
    for start in range(0, total, step):
        count = min(step, total - start)
        t = (np.arange(start, start + count) / AUDIO_RATE).astype(np.float64)
        samples = (0.25 * np.sin(2 * math.pi * TONE_HZ * t)).astype(np.float32)[None, :]
        frame = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
        frame.sample_rate = AUDIO_RATE
        frame.pts = start
        frame.time_base = Fraction(1, AUDIO_RATE)
        container.mux(sound.encode(frame))
    container.mux(sound.encode(None))


def _pictures(width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """The background (coffee.png at the clip's size) and the subject (RGBA: an oval of chelsea.png)."""
    found = photos()
    with Image.open(found["coffee.png"]) as picture:
        background = np.asarray(picture.convert("RGB").resize((width, height), Image.Resampling.BILINEAR))
    side = max(16, round(height * _SUBJECT_SHARE)) // 2 * 2
    with Image.open(found["chelsea.png"]) as picture:
        head = np.asarray(picture.convert("RGB").crop(_SUBJECT_CROP).resize((side, side), Image.Resampling.BILINEAR))
    alpha = _oval((0, 0, side, side), side, side)
    return background, np.dstack([head, alpha])


def _box(index: int, frames: int, size: tuple[int, int], side: int) -> Box:
    """Where the (square) subject is at frame `index`: from the left edge to the right one, halfway down."""
    width, height = size
    left = round((width - side) * index / max(1, frames - 1))
    top = (height - side) // 2
    return (left, top, left + side, top + side)


def _oval(box: Box, width: int, height: int) -> np.ndarray:
    """An (H, W) uint8 mask, 255 inside the oval that fills `box`, 0 outside (hard edge, exact to redraw)."""
    left, top, right, bottom = box
    ys, xs = np.mgrid[0:height, 0:width]
    cx, cy = (left + right - 1) / 2, (top + bottom - 1) / 2
    rx, ry = (right - left) / 2, (bottom - top) / 2
    inside = ((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1.0
    return np.where(inside, 255, 0).astype(np.uint8)


def _compose(background: np.ndarray, subject: np.ndarray, box: Box) -> np.ndarray:
    """The frame: the subject pasted over the background at `box` (its alpha is 0 or 255)."""
    left, top, right, bottom = box
    out = background.copy()
    region = out[top:bottom, left:right]
    inside = subject[..., 3:4] == 255
    out[top:bottom, left:right] = np.where(inside, subject[..., :3], region)
    return out
