"""The memory a process of these services may use: what budgets and one-time costs are sized
against (infer's request and model budgets, prepare's checks of a conversion's peak)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_limit() -> tuple[int, str]:
    """The memory this process may use, and where that figure comes from: its cgroup's limit (a
    container's; v2, else v1) where one is set below the machine's memory, else the machine's."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        with contextlib.suppress(OSError, ValueError):
            text = Path(path).read_text().strip()
            if text != "max" and 0 < int(text) < machine:
                return int(text), f"the cgroup's limit ({path})"
    return machine, "the machine's memory"
