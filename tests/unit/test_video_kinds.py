"""What the command line tells of video files by name, with no PyAV (craftai.video_kinds): the
inputs that are videos, and what it says when the `video` extra is missing."""

from __future__ import annotations

import argparse
import sys

import pytest

from craftai.cli.video import is_video_run
from craftai.video_kinds import VIDEO_SUFFIXES, is_video


def _without_pyav(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one without the `video` extra: importing PyAV fails as it would there."""
    monkeypatch.setitem(sys.modules, "av", None)
    monkeypatch.delitem(sys.modules, "craftai.video", raising=False)


def test_a_video_without_pyav_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_pyav(monkeypatch)
    for suffix in sorted(VIDEO_SUFFIXES):
        with pytest.raises(ValueError, match=r"videos need PyAV \(av is missing\): pip install 'craftai\[video\]'"):
            is_video_run(argparse.Namespace(inputs=[f"clip{suffix.upper()}"]))


def test_pictures_need_no_pyav(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_pyav(monkeypatch)
    assert not is_video_run(argparse.Namespace(inputs=["cat.png", "photos/", "-"]))
    assert "craftai.video" not in sys.modules


def test_a_video_among_other_inputs_is_refused() -> None:
    pytest.importorskip("av", reason="PyAV is the `video` extra of the SDK")
    assert is_video_run(argparse.Namespace(inputs=["clip.webm"]))
    with pytest.raises(ValueError, match=r"clip\.mov is a video: give a video alone"):
        is_video_run(argparse.Namespace(inputs=["cat.png", "clip.mov"]))
    assert is_video("a/b.M4V") and not is_video("clip.gif")
