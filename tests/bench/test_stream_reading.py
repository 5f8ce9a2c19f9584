"""tools/bench/stream_reading.py at a tiny size: both readers answer every call with the server's
three messages (the tool asserts it) and each is timed; no timed assertion."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench import stream_reading


def test_both_readers_answer_and_are_timed(tmp_path: Path) -> None:
    assert stream_reading.main(["--tiny", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "stream_reading.json").read_text())
    assert set(results["us_a_call"]) == {"default reader", "caller's thread"}
    assert all(v > 0 for v in results["us_a_call"].values()) and results["messages_a_call"] == 3
    assert "| caller's thread |" in (tmp_path / "stream_reading.md").read_text()
