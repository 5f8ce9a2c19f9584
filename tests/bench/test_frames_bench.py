"""The frames bench, tiny (tools/bench/frames.py): the same raw frames through `rembg b` and through one
MatteFrames stream, each frame's cutout written as a file. No timed assertion: both sides answer
every frame, their rates are reported, and their alpha planes agree (the same u2netp file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import frames

pytestmark = pytest.mark.slow


def test_a_tiny_run_answers_every_frame_on_both_sides_with_the_same_alpha(tmp_path: Path) -> None:
    """Ours answered as raw pixels (the GPU run's second step), compared with rembg's PNGs."""
    out = tmp_path / "frames.json"
    arguments = ["--size", "96x64", "--frames", "4", "--in-flight", "2", "--stabilize", "0.8", "--format", "raw"]
    assert frames.main([*arguments, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "frames" and report["settings"]["frames"] == 4
    assert report["settings"]["format"] == "raw"
    assert report["ours"]["device"] == "cpu" and report["ours"]["server_ms_p50"] > 0
    assert set(report["ours"]["stages_ms_p50"]) >= {"decode", "model", "encode"}
    for side in (report["ours"], report["rembg"]):
        assert side["wall_s"] > 0 and side["frames_per_s"] > 0 and side["steady_frames_per_s"] > 0, side
    assert report["alpha_most_apart"] == 0  # u2netp's mattes are rembg's byte for byte
    assert report["ratio_frames_per_s"] > 0
    stability = report["stability"]
    assert stability["weight"] == 0.8 and stability["plain"]["frames_per_s"] > 0
    assert stability["stabilized"]["flicker_levels"] <= stability["plain"]["flicker_levels"]


def test_a_tiny_run_of_a_stand_in_recipe_beside_transparent_background(tmp_path: Path) -> None:
    """InSPyReNet's stand-in served for the stream, with estimated colours (as transparent-background's
    rgba); the peer measured where its package imports, else the reason written (not a failure)."""
    out = tmp_path / "frames.json"
    arguments = ["--recipe", "inspyrenet-swinb", "--transparent-background", "--size", "64x48", "--frames", "2"]
    assert frames.main([*arguments, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["recipe"] == "inspyrenet-swinb" and report["settings"]["naive"] is False
    assert report["rembg"] is None and report["ours"]["frames_per_s"] > 0
    peer = report["transparent_background"]
    assert "unavailable" in peer or (peer["frames_per_s"] > 0 and report["ratio_transparent_background"] > 0)
