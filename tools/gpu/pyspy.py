"""py-spy on a running server, for the GPU tools (sam_throughput): recorded in raw
form (every thread, or the GIL holder alone), then summarised as the frames that cost the most.
On the GPU machine py-spy is installed into /tmp/site from .whl/ (tools/gpu/wheels.sh); where it is
not installed, nothing is recorded and the reports say nothing about it.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path
from typing import Any

FILES = (("every thread", "server-threads.txt"), ("GIL holder", "server-gil.txt"))


def record(pid: int, seconds: float, out: Path, gil: bool) -> subprocess.Popen[bytes] | None:
    """py-spy recording the server for `seconds` (on the GPU machine it is installed into /tmp/site
    from .whl/), or None where it is not installed."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path="/tmp/site/bin")
    if spy is None:
        return None
    name = "server-gil.txt" if gil else "server-threads.txt"
    command = [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200"]
    command += ["--format", "raw", "--threads", "--nonblocking", "-o", str(out / name)]
    command += ["--gil"] if gil else []
    with (out / f"{name}.log").open("wb") as log:  # the child keeps its own copy of the handle
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)


def summarise(raw: Path, top: int = 25) -> dict[str, Any]:
    """py-spy's raw stacks ("frame;frame;... count") -> samples per thread, and the frames with
    the most samples on top of the stack (self) and anywhere in it (total)."""
    threads: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        threads[frames[0]] += n
        own[frames[-1]] += n
        for frame in set(frames[1:]):
            total[frame] += n
    samples = sum(threads.values())
    return {
        "samples": samples,
        "threads": threads.most_common(12),
        "self": own.most_common(top),
        "total": total.most_common(top),
    }


def summaries(out: Path) -> dict[str, Any]:
    """The summaries of what `record` left under `out`, by kind."""
    return {kind: summarise(out / name) for kind, name in FILES if (out / name).exists()}


def report_lines(profiles: dict[str, Any]) -> list[str]:
    """Markdown for `summaries`: per kind, the samples by thread and the costliest frames."""
    lines: list[str] = []
    for kind, summary in profiles.items():
        lines += ["", f"py-spy, {kind}: {summary['samples']} samples", "", "threads: " + str(summary["threads"])]
        lines += ["", "| self samples | frame |", "|---|---|"]
        lines += [f"| {n} | `{frame}` |" for frame, n in summary["self"]]
        lines += ["", "| total samples | frame |", "|---|---|"]
        lines += [f"| {n} | `{frame}` |" for frame, n in summary["total"]]
    return lines
