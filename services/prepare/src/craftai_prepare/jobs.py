"""One job per key, joined by every caller, never cancelled by one.

A job runs in a worker thread owned by the registry, not by the RPC that started it: a caller
that goes away only stops listening. Callers that arrive while it runs join it: they get the
latest progress at once, then every later event, and the same terminal result or error.

On a stop, `stopping` is set: a job waiting for another process's lock gives up at once
(craftai_prepare.locks).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from craftai_prepare.reporter import Reporter
from craftai_wire.v1 import prepare_pb2

log = logging.getLogger("craftai.prepare.jobs")
Work = Callable[[Reporter], prepare_pb2.SetupResult]


@dataclass
class Job:
    key: str
    history: list[prepare_pb2.SetupEvent] = field(default_factory=list)
    listeners: set[asyncio.Queue[prepare_pb2.SetupEvent | BaseException]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None

    def publish(self, event: prepare_pb2.SetupEvent | BaseException) -> None:
        if isinstance(event, prepare_pb2.SetupEvent):
            # Keep notices and the newest progress per stage: enough for a late joiner.
            if event.HasField("progress"):
                self.history = [
                    e for e in self.history if not (e.HasField("progress") and e.progress.stage == event.progress.stage)
                ]
            self.history.append(event)
        for queue in self.listeners:
            queue.put_nowait(event)


class JobRegistry:
    """Owns the running jobs (and waits for them on shutdown: a conversion is never cut short)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()  # set when the server stops: jobs waiting for a lock give up
        self._jobs: dict[str, Job] = {}
        self.finished: dict[str, int] = {"ok": 0, "failed": 0}  # for the metrics
        self.joined_total = 0  # callers that joined a job already running

    def running(self) -> list[str]:
        return sorted(self._jobs)

    def listeners(self) -> int:
        """Callers currently waiting on a job's events."""
        return sum(len(job.listeners) for job in self._jobs.values())

    async def join(self, key: str, work: Work) -> AsyncIterator[prepare_pb2.SetupEvent]:
        """Events of the job for `key`, started now unless one is running. Raises its error."""
        job = self._jobs.get(key)
        if job is None:
            job = Job(key)
            self._jobs[key] = job
            job.task = asyncio.create_task(self._run(job, work), name=f"prepare {key}")
        else:
            self.joined_total += 1
        queue: asyncio.Queue[prepare_pb2.SetupEvent | BaseException] = asyncio.Queue()
        for event in job.history:
            queue.put_nowait(event)
        job.listeners.add(queue)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.HasField("result"):
                    return
        finally:
            job.listeners.discard(queue)

    async def _run(self, job: Job, work: Work) -> None:
        loop = asyncio.get_running_loop()

        def publish(event: prepare_pb2.SetupEvent) -> None:
            loop.call_soon_threadsafe(job.publish, event)

        try:
            result = await asyncio.to_thread(work, Reporter(publish))
            outcome: prepare_pb2.SetupEvent | BaseException = prepare_pb2.SetupEvent(result=result)
            self.finished["ok"] += 1
        except Exception as exc:
            log.info("job %s failed: %s", job.key, exc)
            outcome = exc
            self.finished["failed"] += 1
        # Events the worker queued with call_soon_threadsafe run before this point; then finish.
        await asyncio.sleep(0)
        del self._jobs[job.key]
        job.publish(outcome)

    def stop_waiting(self) -> None:
        """From now on, a job waiting for another process's lock gives up (asked to retry)."""
        self.stopping.set()

    async def drain(self) -> None:
        """Wait for every running job to finish (used on shutdown; waits for locks end at once)."""
        self.stop_waiting()
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        if tasks:
            log.info("waiting for %d preparation job(s) to finish", len(tasks))
            await asyncio.gather(*tasks, return_exceptions=True)
