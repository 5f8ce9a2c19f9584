"""Memory with a ceiling: every request's cost admitted against a byte budget, and memory given back.

A small file can declare a large picture (a 160 KB PNG of 7000x7000 costs gigabytes once decoded,
matted and its cutout made), and requests wait for the model workers with their pictures decoded,
so without a ceiling memory grows with concurrency and with one request's size. Each feature
estimates what a request will hold at its peak from the picture's header and the options, before
any pixel is decoded (the picture, the network input, every output asked, the encodes, the
answer; features/*.py), and `DecodeBudget` admits that estimate against
CRAFTAI_DECODE_BUDGET_BYTES:

* a request whose estimate alone is larger than the budget is refused at once, RESOURCE_EXHAUSTED
  / OVER_BUDGET, with the estimate, the limit and what would fit, in plain words: it could never run;
* beyond the budget a request waits its turn, interactive requests first and each class first
  come, first served (craftai_infer.scheduling), up to CRAFTAI_DECODE_WAIT_SECONDS, then is
  refused RESOURCE_EXHAUSTED / MEMORY_BUDGET with a RetryInfo.

The cost is given back when the decoded array is freed (whoever drops it last: a request that
finished, or a model worker that finished a cancelled request's picture), or when the request ends
where nothing holds it, so the budget follows the memory actually held (a refusal's traceback
would hold it for as long as gRPC keeps the call: craftai_common.errors.abort lets go of it).

Given back to the system: glibc keeps freed memory in its heaps (Pillow decodes in blocks of 16 MB,
under glibc's growing mmap threshold), so a burst of large pictures left the process gigabytes
larger for good. `prefer_mmap` fixes the threshold (blocks of 1 MiB and more are mapped, and
unmapped when freed) and `trim` hands back what the heaps still hold once the budget has been idle
for TRIM_AFTER_IDLE_SECONDS.

Between those, a steady stream of requests reuses the heaps rather than faulting fresh pages in
(zeroed, one fault per 4 KiB) on every request: fixing the mmap threshold also fixes glibc's trim
threshold, at 128 KiB, so every free at a heap's top gave memory back that the next request
faulted in again; it is 4 MiB here (8 MiB and more raised the outputs' measured peaks:
tests/unit/test_matte_memory.py). And the heaps are trimmed after the budget has stayed idle,
not after each request. Before these two and the u2netp pre-processing's kept arrays
(pipelines/matte_u2netp.Scratch), a u2netp matte of a 512x512 PNG through the service faulted
~5,300 pages (21 MB) a call; now ~150 (tests/integration/test_memory_reuse.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import ctypes.util
import logging
import os
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from craftai_common.errors import ServiceError, resource_exhausted
from craftai_common.limits import memory_limit
from craftai_infer.scheduling import WorkClass, work_class_var
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.infer.memory")
MMAP_THRESHOLD_BYTES = 1 << 20
TRIM_THRESHOLD_BYTES = 4 << 20  # free memory a heap keeps at its top between trims
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3
TRIM_AFTER_IDLE_SECONDS = 0.5


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
    mapped = bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    return bool(_LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)) and mapped


def resident() -> int:
    """This process's resident memory, in bytes (0 where /proc is not there)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def trim() -> None:
    """Give the free memory of glibc's heaps back to the system (a no-op elsewhere)."""
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


@dataclass(eq=False)
class _Waiter:
    nbytes: int
    admitted: asyncio.Future[None]
    work_class: WorkClass


class DecodeBudget:
    """Bytes of decoded pictures held at once. Touched from the event loop only (the release of a
    picture freed on another thread is handed to the loop)."""

    def __init__(self, budget_bytes: int, wait_seconds: float) -> None:
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        self.used = 0
        self.refused_total = 0
        self.over_total = 0  # refused at once: larger than the whole budget
        self.waited_total = 0
        self.trims_total = 0  # the heaps given back to the system, once the budget stayed idle
        self._queues: dict[WorkClass, collections.deque[_Waiter]] = {c: collections.deque() for c in WorkClass}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle_since = 0.0
        self._trim_due = False

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def _fits(self, nbytes: int) -> bool:
        return self.used + nbytes <= self.budget_bytes

    def _ahead(self, work_class: WorkClass) -> bool:
        """Whether a waiter of this class or a more urgent one is queued (a new request goes after it)."""
        return any(self._queues[c] for c in WorkClass if c <= work_class)

    async def admit(self, nbytes: int, what: str, *, smaller: str = "") -> None:
        """Wait until `nbytes` fit, in the request's class (interactive first, each class first
        come, first served); MEMORY_BUDGET after the wait. `nbytes` larger than the whole budget
        is refused at once (OVER_BUDGET); `smaller` says what would fit, for that message."""
        if nbytes > self.budget_bytes:
            self.over_total += 1
            raise over_budget(what, nbytes, self.budget_bytes, smaller)
        self._loop = asyncio.get_running_loop()
        work_class = work_class_var.get()
        if not self._ahead(work_class) and self._fits(nbytes):
            self.used += nbytes
            return
        waiter = _Waiter(nbytes, self._loop.create_future(), work_class)
        self._queues[work_class].append(waiter)
        self.waited_total += 1
        try:
            async with asyncio.timeout(self.wait_seconds):
                await waiter.admitted
        except BaseException as exc:
            queue = self._queues[work_class]
            if waiter in queue:
                queue.remove(waiter)
                self._admit_waiting()  # a large waiter that leaves may unblock the ones behind it
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
        if self.used == 0:
            self._idle_since = time.monotonic()
            if not self._trim_due:
                self._trim_due = True
                asyncio.get_running_loop().call_later(TRIM_AFTER_IDLE_SECONDS, self._trim)

    def _trim(self) -> None:
        """Trim once the budget has stayed idle TRIM_AFTER_IDLE_SECONDS (after a burst's last
        picture), never between the requests of a steady stream: each would fault in again what
        the trim gave back (~2,000 pages a small u2netp matte)."""
        if self.used:
            self._trim_due = False  # busy again: the budget's next idle schedules it
            return
        idle = time.monotonic() - self._idle_since
        if idle < TRIM_AFTER_IDLE_SECONDS:
            asyncio.get_running_loop().call_later(TRIM_AFTER_IDLE_SECONDS - idle, self._trim)
            return
        self._trim_due = False
        self.trims_total += 1
        asyncio.get_running_loop().run_in_executor(None, trim)  # off the event loop: a trim walks every heap

    def _admit_waiting(self) -> None:
        """The waiters that fit now, interactive first; a class's head that does not fit holds its
        class and every later class (no large request starves behind smaller ones)."""
        for work_class in sorted(WorkClass):
            queue = self._queues[work_class]
            while queue and self._fits(queue[0].nbytes):
                waiter = queue.popleft()
                if waiter.admitted.done():  # its request went away while waiting
                    continue
                self.used += waiter.nbytes
                waiter.admitted.set_result(None)
            if queue:
                return


def over_budget(what: str, nbytes: int, budget_bytes: int, smaller: str = "") -> ServiceError:
    """A request that could never run here: its estimate alone is more than the whole budget."""
    hint = f"; {smaller}" if smaller else ""
    return resource_exhausted(
        Reason.OVER_BUDGET,
        f"{what} needs ~{mib(nbytes)} while it is made, more than the {mib(budget_bytes)} this server gives "
        f"the requests in progress (CRAFTAI_DECODE_BUDGET_BYTES), so it cannot run here{hint}",
        needed_bytes=str(nbytes),
        budget_bytes=str(budget_bytes),
    )


def mib(nbytes: float) -> str:
    """A size as an error message says it."""
    if nbytes >= 10 * 2**30:
        return f"{nbytes / 2**30:,.0f} GiB"
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:,.1f} GiB"
    return f"{nbytes / 2**20:,.0f} MiB"


SESSION_SHARE, SESSION_RANGE = 0.10, (64 << 20, 1 << 30)
REQUEST_SHARE, REQUEST_RANGE = 0.30, (256 << 20, 8 << 30)
MODELS_FLOOR = 512 << 20  # the models' share where the two budgets above take (nearly) the whole limit


@dataclass(frozen=True)
class Budgets:
    """The memory budgets of an infer service: set, or sized from its memory limit so that the
    models (the rest) keep room (docs/OPERATIONS.md, "Memory")."""

    limit: int
    source: str
    requests: int  # CRAFTAI_DECODE_BUDGET_BYTES
    sessions: int  # CRAFTAI_SESSION_BUDGET_BYTES
    models: int  # CRAFTAI_MODELS_BUDGET_BYTES: what the loaded models may hold together

    @classmethod
    def of(
        cls, memory_limit_bytes: int, decode_budget_bytes: int, session_budget_bytes: int, models_budget_bytes: int = 0
    ) -> Budgets:
        limit, source = (memory_limit_bytes, "CRAFTAI_MEMORY_LIMIT_BYTES") if memory_limit_bytes else memory_limit()

        def share(given: int, fraction: float, bounds: tuple[int, int]) -> int:
            return given or int(min(max(limit * fraction, bounds[0]), bounds[1]))

        requests = share(decode_budget_bytes, REQUEST_SHARE, REQUEST_RANGE)
        sessions = share(session_budget_bytes, SESSION_SHARE, SESSION_RANGE)
        models = models_budget_bytes or max(limit - requests - sessions, MODELS_FLOOR)
        return cls(limit, source, requests, sessions, models)

    def __str__(self) -> str:
        return (
            f"memory limit {mib(self.limit)} ({self.source}): {mib(self.requests)} for the requests in progress "
            f"(CRAFTAI_DECODE_BUDGET_BYTES), {mib(self.sessions)} for kept pictures (CRAFTAI_SESSION_BUDGET_BYTES), "
            f"{mib(self.models)} for loaded models (CRAFTAI_MODELS_BUDGET_BYTES)"
        )


def _release_from_anywhere(owner: weakref.ref[DecodeBudget], loop: asyncio.AbstractEventLoop, nbytes: int) -> None:
    budget = owner()
    if budget is None:
        return
    with contextlib.suppress(RuntimeError):  # a closed loop: the service stopped
        loop.call_soon_threadsafe(budget.release, nbytes)
