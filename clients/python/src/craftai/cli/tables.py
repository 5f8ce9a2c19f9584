"""Plain-text tables for the commands that list things (status, models)."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Each row as one line: every column but the last padded to its widest cell, two spaces
    apart; the last (free text, as long as it is) follows unpadded."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]]) for row in rows]
