"""What the command line tells of video files by their names alone, with no PyAV: which inputs are
videos and which output kind a file name asks for (craftai.video reads and writes them, with the
`video` extra). Cheap and file-free, so the command checks its arguments before any work, and says
what to install when PyAV is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["OUTPUT_SUFFIXES", "VIDEO_SUFFIXES", "OutputKind", "VideoError", "is_video", "output_kind"]

VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".webm", ".mkv", ".avi", ".m4v"})
OutputKind = Literal["webm", "mov", "mp4", "png"]
OUTPUT_SUFFIXES: dict[str, OutputKind] = {".webm": "webm", ".mov": "mov", ".mp4": "mp4"}


class VideoError(Exception):
    """A video could not be read or written; the message says what to do about it."""


def is_video(path: Path | str) -> bool:
    """Whether `path` names a video input by its suffix (the CLI's way to tell videos from pictures)."""
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def output_kind(path: Path | str, *, alpha: bool = False, size: tuple[int, int] | None = None) -> OutputKind:
    """The kind of output `path` asks for, or a VideoError saying why it can't be written.

    .webm: VP9 (with an alpha plane when `alpha`); .mov: ProRes 4444 with alpha, ProRes 422 HQ without;
    .mp4: H.264, which has no alpha and needs an even width and height (`size` is (width, height));
    an existing folder or a name without a suffix: a PNG sequence. Cheap and file-free, so a command
    can check its arguments before any work.
    """
    path = Path(path)
    if path.is_dir() or not path.suffix:
        if path.exists() and not path.is_dir():
            raise VideoError(f"{path} is a file: a PNG sequence needs a folder; name a new or existing folder")
        return "png"
    suffix = path.suffix.lower()
    kind = OUTPUT_SUFFIXES.get(suffix)
    if kind is None:
        raise VideoError(
            f"can't write {suffix} videos: name the output .webm (VP9, keeps transparency), .mov (ProRes, "
            "keeps transparency), .mp4 (H.264, no transparency) or a folder for PNG frames"
        )
    if kind == "mp4" and alpha:
        raise VideoError(
            f"{path.name}: MP4 (H.264) has no transparency: write .webm or .mov to keep it, a folder for "
            "PNG frames, or ask for a composite over a colour or picture to get an opaque .mp4"
        )
    if kind == "mp4" and size is not None and (size[0] % 2 or size[1] % 2):
        raise VideoError(
            f"{path.name}: H.264 in .mp4 needs an even width and height and this video is {size[0]}x{size[1]}: "
            "write .webm or .mov (any size), or crop or scale the input to an even size first"
        )
    return kind
