"""A job stopped while it waits: run it on a thread, stop it once it says it waits, and time how
long it then takes to end (the prepare tests of a stop that must not wait on a lock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def stopped_while_waiting(
    work: Callable[[], object], waiting: Callable[[], bool], stop: Callable[[], None], release: Callable[[], None]
) -> tuple[object, float]:
    """`work`'s result or exception, and the seconds it ran on after `stop` (called once `waiting()`
    holds, within 10 s); `release` (what held it) is called in the end, whatever happened."""
    outcome: list[object] = []

    def job() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=job)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while not waiting():
            assert time.monotonic() < deadline, "the job never said it waits"
            time.sleep(0.01)
        stopped = time.monotonic()
        stop()
        worker.join(timeout=10)
        took = time.monotonic() - stopped
    finally:
        release()
        worker.join(timeout=10)
    (result,) = outcome
    return result, took
