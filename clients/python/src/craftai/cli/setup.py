"""`craftai setup FEATURE`: download, verify and prepare a route, with a progress bar a stage."""

from __future__ import annotations

import argparse
import time

from tqdm import tqdm

from craftai.cli.connection import connect
from craftai.installation import Notice, Progress, SetupOutput


def cmd_setup(options: argparse.Namespace) -> int:
    bars: dict[str, tqdm] = {}  # type: ignore[type-arg]
    result: SetupOutput | None = None
    started = time.perf_counter()
    with connect(options) as ai:
        try:
            for event in ai.setup(options.feature, options.recipe, options.engine):
                if isinstance(event, Progress):
                    bar = bars.get(event.stage)
                    if bar is None:
                        unit_scale = event.unit == "bytes"
                        bar = tqdm(
                            total=event.total or None,
                            unit="B" if unit_scale else "it",
                            unit_scale=unit_scale,
                            unit_divisor=1024,
                            desc=event.stage,
                            leave=True,
                            disable=options.quiet,
                        )
                        bars[event.stage] = bar
                    if event.total and bar.total != event.total:
                        bar.reset(total=event.total)
                    bar.n = event.done
                    bar.set_postfix_str(event.message[-60:], refresh=True)
                elif isinstance(event, Notice):
                    tqdm.write(f"note: {event.message}")
                else:
                    result = event
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
