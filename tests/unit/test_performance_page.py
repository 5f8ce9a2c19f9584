"""docs/PERFORMANCE.md's tables are what the benchmarks' raw JSON gives (tools/bench/figures.py):
the page cannot drift from docs/figures/, and it stays a page of current figures, not a journal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tools.bench import figures


def test_the_page_is_what_the_raw_figures_give() -> None:
    assert figures.main(["--check"]) == 0, "run: .venv/bin/python -m tools.bench.figures"


def test_a_changed_raw_figure_or_a_hand_edit_fails_the_check(tmp_path: Path) -> None:
    """The check above must be able to fail: a figure changed in its JSON, or in the page."""
    copy = tmp_path / "figures"
    shutil.copytree(figures.FIGURES, copy)
    raw = copy / "2026-12-04-u2netp_cpu-memory-reuse-2.json"
    run = json.loads(raw.read_text())
    run["ratio"]["2"] = 1.5
    raw.write_text(json.dumps(run))
    page = figures.PAGE.read_text()
    assert figures.with_block(page, figures.render(copy)) != page
    assert "**1.50**" in figures.render(copy)
    edited = page.replace("**1.02**", "**1.12**", 1)
    assert edited != page and figures.with_block(edited, figures.render()) == page


def test_the_page_stays_short() -> None:
    """One current table a feature and its notes; history goes to docs/figures/."""
    assert len(figures.PAGE.read_text().splitlines()) <= 250  # a dozen lines a feature: the video on a GPU was the last
