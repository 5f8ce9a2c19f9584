"""The interactive-beside-bulk bench, tiny (tools/bench/interactive.py; the full runs are in
docs/PERFORMANCE.md): it starts its server, measures both phases and the memory, and writes its
JSON. No timed assertion: every interactive call is answered, the bulk clients get work done, and
each app reaches the replica it was given."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tools.bench import interactive

pytestmark = pytest.mark.slow


def test_a_tiny_run_answers_every_call_and_reports_both_phases(tmp_path: Path) -> None:
    """With two infer replicas standing in for two GPU processes (`--gpus 0,1` on the CPU), the
    editor on the first and the other apps on the second (`--apart`), as the GPU figures are made."""
    out = tmp_path / "interactive.json"
    arguments = ["--rounds", "2", "--encoders", "1", "--everything", "1", "--points-per-side", "4", "--large", "1"]
    arguments += ["--gpus", "0,1", "--apart", "--large-side", "400", "--ramp", "0.5", "--settle", "0.5"]
    assert interactive.main([*arguments, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for phase in ("alone_ms", "loaded_ms"):
        assert {call: stats["n"] for call, stats in result[phase].items()} == {"click": 2.0, "matte": 2.0}
    # the other apps ran in processes of their own and reported what they got done
    assert result["bulk_done"] and result["memory_mib"]["warm"] > 0 and result["memory_mib"]["peak"] > 0
    # where a loaded click spent its time on the server (its queue is in its "model" stage)
    for phase in ("alone", "loaded"):
        assert {"model", "png"} <= set(result["server_stages_ms"][phase]["click"]), result["server_stages_ms"]
        assert "model" in result["server_stages_ms"][phase]["matte"]
    # the model's calls from the server's metrics: each click's decoder call counted as interactive
    calls = result["model_calls"]["calls"]
    decodes = next(c for key, c in calls.items() if key.endswith(" decode interactive"))
    assert decodes["count"] >= 2 * 2 + 3 and decodes["mean_ms"] > 0 and decodes["under_ms"]["5000.0"] == 1.0
    assert any(key.endswith(" encode bulk") for key in calls), sorted(calls)
    assert any(" queue wait interactive " in key for key in calls), sorted(calls)
    # apart: the editor's calls reached the first replica only, the other apps' ('*') the second only
    first, second = result["model_calls"]["apps_by_replica"]
    assert "editor" in first and "*" not in first, first
    assert "*" in second and "editor" not in second, second


def test_the_bulk_threads_are_dealt_to_the_apps_in_turn() -> None:
    args = argparse.Namespace(encoders=6, everything=2, large=1, videos=2)
    apps = interactive._bulk_apps(args, apps=4)
    dealt = [(a.encoders, a.everything, a.large, a.videos) for a in apps]
    assert dealt == [(2, 1, 1, 1), (2, 1, 0, 1), (1, 0, 0, 0), (1, 0, 0, 0)]
    assert len({a.name for a in apps}) == 4
