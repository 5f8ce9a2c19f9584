"""`craftai setup FEATURE [--from PATH]`: download (or take from PATH), verify and prepare a route,
with a progress bar a stage (plain lines when not on a terminal)."""

from __future__ import annotations

import argparse
import sys
import time

from craftai.cli.connection import connect
from craftai.cli.progress import Bar, write
from craftai.installation import Notice, Progress, SetupOutput


def cmd_setup(options: argparse.Namespace) -> int:
    bars: dict[str, Bar] = {}
    result: SetupOutput | None = None
    started = time.perf_counter()
    with connect(options) as ai:
        try:
            for event in ai.setup(options.feature, options.recipe, options.engine, from_path=options.from_path):
                if isinstance(event, Progress):
                    bar = bars.get(event.stage)
                    if bar is None:
                        bar = bars[event.stage] = Bar(event.stage, event.unit, quiet=options.quiet)
                    bar.show(event.done, event.total, event.message)
                elif isinstance(event, Notice):
                    write(f"note: {event.message}", sys.stderr)
                else:
                    result = event
        except (ValueError, OSError) as error:  # --from PATH: nothing of the route there, or no PATH
            print(f"craftai: {error}", file=sys.stderr)
            return 2
        finally:
            for bar in bars.values():
                bar.close()
    assert result is not None
    r = result.route
    what = "already set up (files checked)" if result.already_done else "set up"
    if result.revision:
        what += f", prepared revision {result.revision}" + (" (prepared now)" if result.prepared_now else "")
    print(f"{r.feature} {r.recipe} ({r.engine}): {what} in {time.perf_counter() - started:.1f} s")
    for f in result.files:
        print(f"  {f.folder}/{f.name}  {f.size:,} bytes  sha256 {f.sha256[:16]}…  from {f.source}")
    return 0
