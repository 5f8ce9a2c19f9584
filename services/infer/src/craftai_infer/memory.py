"""Memory with a ceiling: decoded pictures admitted against a byte budget, and memory given back.

A small file can declare a large picture (a 160 KB PNG of 7000x7000 costs ~650 MB once decoded and
matted), and requests wait for the one model worker with their pictures decoded, so without a
ceiling memory grows with concurrency. `DecodeBudget` admits each picture's estimated cost (its
pixels times the feature's bytes per pixel, from the header, before any pixel is decoded) against
CRAFTAI_DECODE_BUDGET_BYTES: beyond it a request waits its turn (first come, first served), up to
CRAFTAI_DECODE_WAIT_SECONDS, then is refused RESOURCE_EXHAUSTED / MEMORY_BUDGET with a RetryInfo.
A picture larger than the whole budget waits until it is alone. The cost is given back when the
decoded array is freed (whoever drops it last: a request that finished, or a model worker that
finished a cancelled request's picture), so the budget follows the memory actually held.

Given back to the system: glibc keeps freed memory in its heaps (Pillow decodes in blocks of 16 MB,
under glibc's growing mmap threshold), so a burst of large pictures left the process gigabytes
larger for good. `prefer_mmap` fixes the threshold (blocks of 1 MiB and more are mapped, and
unmapped when freed) and `trim` hands back what the heaps still hold once the budget is idle.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import ctypes.util
import logging
import time
import weakref
from dataclasses import dataclass

from craftai_common.errors import Reason, resource_exhausted

log = logging.getLogger("craftai.infer.memory")
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
TRIM_EVERY_SECONDS = 1.0


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:  # pragma: no cover - no C library to speak of
        return None


_LIBC = _libc()


def prefer_mmap() -> bool:
    """Large blocks mapped (and unmapped when freed) rather than kept in glibc's heaps; False
    where the C library is not glibc."""
    if _LIBC is None or not hasattr(_LIBC, "mallopt"):
        return False
    return bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def trim() -> None:
    """Give the free memory of glibc's heaps back to the system (a no-op elsewhere)."""
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


@dataclass(eq=False)
class _Waiter:
    nbytes: int
    admitted: asyncio.Future[None]


class DecodeBudget:
    """Bytes of decoded pictures held at once. Touched from the event loop only (the release of a
    picture freed on another thread is handed to the loop)."""

    def __init__(self, budget_bytes: int, wait_seconds: float) -> None:
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        self.used = 0
        self.refused_total = 0
        self.waited_total = 0
        self._queue: collections.deque[_Waiter] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._trimmed_at = 0.0
        self._trim_due = False

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def _fits(self, nbytes: int) -> bool:
        return self.used + nbytes <= self.budget_bytes or self.used == 0

    async def admit(self, nbytes: int, what: str) -> None:
        """Wait until `nbytes` fit (first come, first served); MEMORY_BUDGET after the wait."""
        self._loop = asyncio.get_running_loop()
        if not self._queue and self._fits(nbytes):
            self.used += nbytes
            return
        waiter = _Waiter(nbytes, self._loop.create_future())
        self._queue.append(waiter)
        self.waited_total += 1
        try:
            async with asyncio.timeout(self.wait_seconds):
                await waiter.admitted
        except BaseException as exc:
            if waiter in self._queue:
                self._queue.remove(waiter)
            elif waiter.admitted.done() and not waiter.admitted.cancelled():
                self.release(nbytes)  # admitted just as it gave up: give it back
            if not isinstance(exc, TimeoutError):
                raise
            self.refused_total += 1
            raise resource_exhausted(
                Reason.MEMORY_BUDGET,
                f"the server is busy with large pictures: {what} needs ~{nbytes / 2**20:,.0f} MiB once decoded "
                f"and the {self.budget_bytes / 2**20:,.0f} MiB for decoded pictures (CRAFTAI_DECODE_BUDGET_BYTES) "
                f"stayed taken for {self.wait_seconds:g} s (CRAFTAI_DECODE_WAIT_SECONDS); retry in a moment",
                retry_after=1.0,
                needed_bytes=str(nbytes),
                budget_bytes=str(self.budget_bytes),
            ) from None

    def hold_until_freed(self, picture: object, nbytes: int) -> None:
        """Give `nbytes` back when `picture` (a numpy array) is freed, on whichever thread."""
        loop = self._loop or asyncio.get_running_loop()
        weakref.finalize(picture, _release_from_anywhere, weakref.ref(self), loop, nbytes)

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        self._admit_waiting()
        if self.used == 0 and not self._trim_due:
            # Once the budget is idle, at most once a second (a burst's last picture included).
            self._trim_due = True
            wait = max(0.0, self._trimmed_at + TRIM_EVERY_SECONDS - time.monotonic())
            asyncio.get_running_loop().call_later(wait, self._trim)

    def _trim(self) -> None:
        self._trim_due = False
        self._trimmed_at = time.monotonic()
        if self.used == 0:  # off the event loop: a trim walks every heap
            asyncio.get_running_loop().run_in_executor(None, trim)

    def _admit_waiting(self) -> None:
        while self._queue and self._fits(self._queue[0].nbytes):
            waiter = self._queue.popleft()
            if waiter.admitted.done():  # its request went away while waiting
                continue
            self.used += waiter.nbytes
            waiter.admitted.set_result(None)


def _release_from_anywhere(owner: weakref.ref[DecodeBudget], loop: asyncio.AbstractEventLoop, nbytes: int) -> None:
    budget = owner()
    if budget is None:
        return
    with contextlib.suppress(RuntimeError):  # a closed loop: the service stopped
        loop.call_soon_threadsafe(budget.release, nbytes)
