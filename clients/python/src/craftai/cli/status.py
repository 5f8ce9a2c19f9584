"""`craftai status [FEATURE]`: the infer service's device and engines, and every route's state."""

from __future__ import annotations

import argparse

from craftai.cli.connection import connect


def cmd_status(options: argparse.Namespace) -> int:
    with connect(options) as ai:
        runtime = ai.runtime()
        gpu = f"GPU: {runtime.gpu_name}" if runtime.gpu_available else "no GPU"
        print(f"infer device: {runtime.device} ({gpu}); engines: {', '.join(runtime.engines)}")
        rows = [
            (f"{r.route.feature}", r.route.recipe, r.route.engine, r.state or "?", r.detail)
            for r in ai.status(options.feature or "")
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)] if rows else [0] * 4
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    return 0
