"""The load test, short (tools/bench/load.py; the 60 s run is in docs/PERFORMANCE.md): a few
clients over two apps mixing sessions, clicks and mattes against `craftai serve` on loopback.
No timed assertion: every call is answered (or meets a documented limit), and the server's
resident memory stays within the warm-up + the session budget + the stated margin."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench import load

pytestmark = pytest.mark.slow


def test_a_short_mixed_load_has_no_errors_and_bounded_memory(tmp_path: Path) -> None:
    # two SAM embeddings for three clients: less than their sessions may hold at once (each client
    # is one more encoder run in the warm-up, most of the test's time)
    budget = 32 << 20
    with load.serve_fixture(tmp_path, {"CRAFTAI_SESSION_BUDGET_BYTES": str(budget)}) as served:
        report = load.run(
            served.address,
            seconds=2,
            clients=3,
            apps=2,
            server_pid=served.pid,
            pictures=load.default_pictures()[:2],
            clicks=2,
        )
    load.print_report(report)
    assert report.errors == {}
    assert {"Matte", "OpenSession", "Segment", "CloseSession"} <= set(report.rpcs)
    assert report.session_budget_mib == 32
    assert report.rss_max_mib <= report.rss_bound_mib, report
    assert report.ok
