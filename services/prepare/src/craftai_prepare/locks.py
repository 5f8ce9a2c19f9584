"""The store's cross-process locks (one per route, one per kept archive), waited for with a limit.

Replicas on one store take a route's lock before working on it, and an archive's lock before
taking files out of it. A job that finds a lock held waits (CRAFTAI_LOCK_WAIT_SECONDS at most).
A stopping server does not wait on such a wait: the job gives up at once with UNAVAILABLE /
SHUTTING_DOWN, which the SDK retries (on the next replica, or once this one is back); a job that
holds a lock is a job at work and is waited for. A lock file that is a symbolic link (or not a
regular file) is refused in plain words (FAILED_PRECONDITION / UNSAFE_STORE), never followed.
"""

from __future__ import annotations

import contextlib
import errno
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from filelock import FileLock, Timeout

from craftai_common.errors import ServiceError
from craftai_common.store import Store
from craftai_prepare.reporter import Reporter
from craftai_wire.vocabulary import Reason

POLL_SECONDS = 0.2


def unsafe_path(store: Store, path: Path) -> ServiceError:
    """The plain refusal of a store path that is a symbolic link (or not a regular file)."""
    return ServiceError(
        grpc.StatusCode.FAILED_PRECONDITION,
        Reason.UNSAFE_STORE,
        f"{path} is a symbolic link or not a regular file: the store's files are never written through a link "
        f"(it could point anywhere); remove it and run the setup again (store: {store.root})",
        metadata={"path": str(path)},
    )


@contextlib.contextmanager
def store_lock(  # noqa: PLR0917 - one lock's words and limits, from two places
    store: Store,
    name: str,
    what: str,
    wait_seconds: float,
    stopping: threading.Event | None,
    on_wait: Callable[[], None],
    on_timeout: Callable[[], Exception],
) -> Iterator[None]:
    """The store's lock `name`, held for the block. `what`: the work another process does under it
    (for the stop's words); `on_wait` once when it is found held; `on_timeout` makes the error
    raised after `wait_seconds`."""
    path = store.lock_path(name)
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise unsafe_path(store, path)
    lock = FileLock(path)
    try:
        if not _acquired(lock, 0):
            on_wait()
            deadline = time.monotonic() + wait_seconds
            while not _acquired(lock, min(POLL_SECONDS, max(deadline - time.monotonic(), 0))):
                if stopping is not None and stopping.is_set():
                    raise ServiceError(
                        grpc.StatusCode.UNAVAILABLE,
                        Reason.SHUTTING_DOWN,
                        f"the server is stopping: this setup was waiting for another process {what} "
                        "and did not start; retry (the SDK does so by itself)",
                        retry_after=1.0,
                    )
                if time.monotonic() >= deadline:
                    raise on_timeout()
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


def route_lock(
    store: Store, key: str, reporter: Reporter, wait_seconds: float, stopping: threading.Event | None
) -> contextlib.AbstractContextManager[None]:
    """The lock on one route's files and conversion (`key`: feature/recipe/engine)."""
    return store_lock(
        store,
        key,
        f"preparing {key}",
        wait_seconds,
        stopping,
        lambda: reporter.progress(
            "wait", 0, 0, "", "another process is preparing the same route; waiting for it", force=True
        ),
        lambda: ServiceError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Reason.PREPARATION_FAILED,
            f"another process held the lock on {key} for more than {wait_seconds:.0f} s",
        ),
    )
