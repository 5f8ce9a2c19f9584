"""The cutout sessions bench, tiny (tools/bench/cutout.py): it starts its server, opens a session on
a small picture, times two refinements through gRPC and two through `craftai web` (as the page sends
them) and writes its JSON. No timed assertion: every refinement is answered and reported with the
server's total and each of its stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import cutout

pytestmark = pytest.mark.slow


def test_a_tiny_run_reports_each_refinement_and_their_percentiles(tmp_path: Path) -> None:
    out = tmp_path / "cutout.json"
    assert cutout.main(["--size", "320x240", "--refinements", "2", "--web", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "cutout" and report["server"]["device"] == "cpu"
    assert report["settings"] == {
        "size": "320x240",
        "refinements": 2,
        "outputs": "cutout",
        "picture": "astronaut.png with coffee.png pasted",
    }
    assert report["open_ms"] > 0
    summary = report["summary"]
    timed = [summary["round_trip_ms"], summary["server_ms"], *summary["stages_ms"].values()]
    assert set(summary["stages_ms"]) == {"model", "merge", "encode"}
    for stats in timed:
        assert stats["n"] == 2 and 0 < stats["p50"] <= stats["p90"], summary
    assert len(report["refinements"]) == 2
    for refinement in report["refinements"]:
        assert set(refinement) == {"round_trip_ms", "server_ms", "stages_ms", "changed_pixels"}
        assert set(refinement["stages_ms"]) == {"model", "merge", "encode"}
        assert all(ms > 0 for ms in refinement["stages_ms"].values()), refinement
        # the server's stages are within its total, which is within the app's round trip
        assert sum(refinement["stages_ms"].values()) <= refinement["server_ms"] <= refinement["round_trip_ms"]
        assert 0 < refinement["changed_pixels"] <= 320 * 240  # the keep click on the left-out subject
    assert summary["changed_pixels"]["min"] <= summary["changed_pixels"]["p50"] <= summary["changed_pixels"]["max"]
    web = report["web"]["summary"]
    assert web["round_trip_ms"]["n"] == 2 and web["server_ms"]["p50"] <= web["round_trip_ms"]["p50"]
    assert web["changed_pixels"]["min"] > 0


def test_a_tiny_page_run_times_each_click_to_the_new_cutout_drawn(tmp_path: Path) -> None:
    from tools.bench import cutout_page

    out = tmp_path / "page.json"
    assert cutout_page.main(["--size", "320x240", "--clicks", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "cutout_page" and report["settings"]["clicks"] == 2
    assert report["removed_ms"] > 0 and report["fix_open_ms"] > 0
    assert len(report["clicks_ms"]) == 2 and all(ms > 0 for ms in report["clicks_ms"])
    stats = report["click_to_picture_ms"]
    assert stats["n"] == 2 and 0 < stats["p50"] <= stats["p90"]


def test_the_merge_steps_tool_times_each_step_for_each_region(tmp_path: Path) -> None:
    """tools/gpu/cutout_steps.py, tiny on the CPU: each region changes pixels, more for a larger one,
    and each step of the merge is timed."""
    from tools.gpu import cutout_steps

    assert cutout_steps.main(["--tiny", "--device", "cpu", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "cutout_steps.json").read_text())
    runs = report["runs"]
    assert [r["region_share"] for r in runs] == [0.66, 0.2, 0.05]
    changed = [r["pixels_changed"] for r in runs]
    assert changed == sorted(changed, reverse=True) and changed[-1] > 0, changed
    for r in runs:
        assert set(r["median_ms"]) == {"upload", "merge", "colours", "outputs"}
        assert all(v >= 0 for v in r["median_ms"].values())
    assert "| 0.05 |" in (tmp_path / "cutout_steps.md").read_text()
