"""One job per key, joined by every caller, never cancelled by one; the store's lock per route.

A job runs in a worker thread owned by the registry, not by the RPC that started it: a caller
that goes away only stops listening. Callers that arrive while it runs join it: they get the
latest progress at once, then every later event, and the same terminal result or error.

Across processes (replicas on one store), a route's job runs under the store's lock for it
(`route_lock`): a job that finds it held waits (CRAFTAI_LOCK_WAIT_SECONDS) with a "wait" progress.
A stopping server does not wait on such a wait: the job gives up at once with UNAVAILABLE /
SHUTTING_DOWN, which the SDK retries (on the next replica, or once this one is back); a job that
holds the lock is a job at work and is waited for. A lock file that is a symbolic link is refused
in plain words (FAILED_PRECONDITION / UNSAFE_STORE), never followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import grpc
from filelock import FileLock, Timeout

from craftai_common.errors import Reason, ServiceError
from craftai_common.store import Store
from craftai_prepare.downloads import unsafe_path
from craftai_prepare.reporter import Reporter
from craftai_wire.v1 import prepare_pb2

log = logging.getLogger("craftai.prepare.jobs")
Work = Callable[[Reporter], prepare_pb2.SetupResult]
LOCK_POLL_SECONDS = 0.2


@contextlib.contextmanager
def route_lock(
    store: Store, key: str, reporter: Reporter, wait_seconds: float, stopping: threading.Event
) -> Iterator[None]:
    """The store's cross-process lock for `key`, held for the block (see the module's words)."""
    path = store.lock_path(key)
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise unsafe_path(store, path)
    lock = FileLock(path)
    try:
        if not _acquired(lock, 0):
            waiting = "another process is preparing the same route; waiting for it"
            reporter.progress("wait", 0, 0, "", waiting, force=True)
            deadline = time.monotonic() + wait_seconds
            while not _acquired(lock, min(LOCK_POLL_SECONDS, max(deadline - time.monotonic(), 0))):
                if stopping.is_set():
                    raise ServiceError(
                        grpc.StatusCode.UNAVAILABLE,
                        Reason.SHUTTING_DOWN,
                        f"the server is stopping: this setup was waiting for another process preparing {key} "
                        "and did not start; retry (the SDK does so by itself)",
                        retry_after=1.0,
                    )
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        Reason.PREPARATION_FAILED,
                        f"another process held the lock on {key} for more than {wait_seconds:.0f} s",
                    )
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # made a link since it was looked at: filelock opens it O_NOFOLLOW
            raise unsafe_path(store, path) from exc
        raise
    try:
        yield
    finally:
        lock.release()


def _acquired(lock: FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        return False
    return True


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
