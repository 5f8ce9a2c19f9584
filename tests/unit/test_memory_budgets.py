"""The infer service's memory budgets (craftai_infer.memory.Budgets): set, or sized from the memory
the process may use (a container's cgroup limit where it is below the machine's), within bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from craftai_common import limits
from craftai_infer import memory

GiB, MiB = 1 << 30, 1 << 20


def test_the_budgets_are_shares_of_the_memory_limit_within_bounds() -> None:
    pod = memory.Budgets.of(4 * GiB, 0, 0)  # deploy/k8s: infer's limit
    assert (pod.requests, pod.sessions) == (int(4 * GiB * 0.30), int(4 * GiB * 0.10))
    small = memory.Budgets.of(256 * MiB, 0, 0)
    assert (small.requests, small.sessions) == (256 * MiB, 64 * MiB)
    large = memory.Budgets.of(256 * GiB, 0, 0)
    assert (large.requests, large.sessions) == (8 * GiB, GiB)
    assert "CRAFTAI_DECODE_BUDGET_BYTES" in str(pod) and "CRAFTAI_MEMORY_LIMIT_BYTES" in str(pod)


def test_budgets_set_by_hand_are_kept() -> None:
    given = memory.Budgets.of(4 * GiB, 123 * MiB, 45 * MiB)
    assert (given.requests, given.sessions) == (123 * MiB, 45 * MiB)


def test_a_cgroup_limit_below_the_machine_is_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(limits, "_CGROUP_LIMITS", (str(limit),))
    limit.write_text("max\n")
    assert limits.memory_limit()[1] == "the machine's memory"
    limit.write_text(f"{2 * GiB}\n")
    assert limits.memory_limit() == (2 * GiB, f"the cgroup's limit ({limit})")
    assert memory.Budgets.of(0, 0, 0).requests == int(2 * GiB * 0.30)
