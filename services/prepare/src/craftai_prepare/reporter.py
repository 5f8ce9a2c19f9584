"""Progress from a job's worker thread to every caller that waits on the job."""

from __future__ import annotations

import time
from collections.abc import Callable

from craftai_wire.v1 import common_pb2, prepare_pb2

Publish = Callable[[prepare_pb2.SetupEvent], None]


class Reporter:
    """Turns steps of the work into SetupEvents; byte progress is thinned to ~10 events a second."""

    def __init__(self, publish: Publish, min_interval: float = 0.1) -> None:
        self._publish = publish
        self._min_interval = min_interval
        self._last = 0.0

    def progress(self, stage: str, done: int, total: int, unit: str, message: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and done != total and now - self._last < self._min_interval:
            return
        self._last = now
        self._publish(
            prepare_pb2.SetupEvent(
                progress=common_pb2.Progress(stage=stage, done=done, total=total, unit=unit, message=message)
            )
        )

    def notice(self, code: str, message: str) -> None:
        self._publish(prepare_pb2.SetupEvent(notice=common_pb2.Notice(code=code, message=message)))
