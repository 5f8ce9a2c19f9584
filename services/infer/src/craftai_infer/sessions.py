"""Kept pictures for image.segment: the encoder's output under a session id, so later prompts skip it.

A session holds one picture's image embedding (with the picture's size and the route that made
it). Sessions are

* scoped by app id: a session is found only with the app id that opened it; another app asking
  for the same id gets "not found", exactly as if it did not exist;
* owned by a tenant (craftai_common.metadata: an app with a key of its own, or every app id a `*`
  key admits, together), which no other tenant's opens can touch;
* bounded by a memory budget (`CRAFTAI_SESSION_BUDGET_BYTES`), counted as the bytes of the kept
  embeddings (`embedding.nbytes`, the arrays themselves; the picture is not kept), and for a
  cutout session its picture, matte and colours too (`kept.nbytes`): opening a
  session evicts the least recently used sessions of the same tenant until the new one fits;
  when the rest of the budget is held by other tenants, the open is refused RESOURCE_EXHAUSTED /
  TOO_MANY_SESSIONS with a RetryInfo (when their oldest picture is forgotten), never paid for
  with another tenant's pictures;
* limited per tenant (`CRAFTAI_MAX_SESSIONS_PER_APP`): a tenant that has as many open as that is
  told RESOURCE_EXHAUSTED / TOO_MANY_SESSIONS (with a RetryInfo);
* forgotten after `CRAFTAI_SESSION_IDLE_SECONDS` without use (each prompt is a use), checked on
  every access and by a periodic sweep so memory is given back even when no request comes;
* closed by their owner (CloseSession), or all at once when the service stops.

The store is touched only from the event loop (no locks); every operation is a few dict steps and
never waits on model work. A prompt that already holds a session's embedding finishes with it
even if the session is evicted meanwhile (memory may exceed the budget by that one embedding
until the prompt ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from craftai_common.errors import ServiceError, resource_exhausted
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.infer.sessions")


class Embedding(Protocol):
    """What a segment model's encoder returns; `nbytes` is what the budget counts."""

    @property
    def nbytes(self) -> int: ...


@dataclass
class Session:
    """One kept picture. `route` is the LoadedRoute whose encoder made `embedding`."""

    id: str
    app_id: str
    tenant: str
    embedding: Embedding
    width: int
    height: int
    route: Any
    device: str
    nbytes: int
    created: float
    last_used: float = field(default=0.0)
    kept: Any = None  # a cutout session's picture, matte and colours (features/cutout.py), counted in nbytes


@dataclass(frozen=True)
class Opened:
    """What `SessionStore.open` did: the new session and the sessions evicted to make room."""

    session: Session
    evicted: int


class BudgetTooSmallError(Exception):
    """One embedding alone is larger than the whole session budget."""

    def __init__(self, nbytes: int, budget: int) -> None:
        super().__init__(f"one kept picture needs {nbytes:,} bytes; the session budget is {budget:,} bytes")
        self.nbytes = nbytes
        self.budget = budget


class SessionStore:
    """Sessions in least-recently-used order (oldest first), with their total bytes."""

    def __init__(
        self,
        budget_bytes: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_per_app: int = 0,
        replica: str = "",
    ) -> None:
        self.budget_bytes = budget_bytes
        self.replica = replica  # named in every session id: `<token>.<replica>` (the SDK routes by it)
        self.idle_seconds = idle_seconds
        self.max_per_app = max_per_app  # 0: no limit
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._per_app: dict[str, int] = {}
        self._per_tenant: dict[str, int] = {}
        self._bytes = 0
        self._sweeper: asyncio.Task[None] | None = None
        self.opened_total = 0
        self.evicted_total = 0
        self.expired_total = 0
        self.refused_total = 0  # opens refused because other tenants held the budget
        self.hits_total = 0  # prompts that found their session
        self.misses_total = 0  # prompts that did not (the SDK then sends the picture again)

    # -- queries -------------------------------------------------------------------------

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._sessions)

    def count(self, app_id: str) -> int:
        """How many sessions the app has open."""
        return self._per_app.get(app_id, 0)

    def uses(self, route: object) -> bool:
        """Whether a kept session was made by `route` (its prompts need it loaded)."""
        return any(session.route is route for session in self._sessions.values())

    def per_app(self) -> dict[str, int]:
        return dict(self._per_app)

    def check_room(self, app_id: str, tenant: str = "") -> None:
        """RESOURCE_EXHAUSTED / TOO_MANY_SESSIONS when the tenant (the app, where "") has its most
        sessions open already; checked before the encoder runs, and again when the session is kept."""
        self.expire()
        limit = self.max_per_app
        tenant = tenant or app_id
        if limit and self._per_tenant.get(tenant, 0) >= limit:
            who = f"app '{app_id}'" if tenant == app_id else "the apps without a key of their own (a '*' key) together"
            raise resource_exhausted(
                Reason.TOO_MANY_SESSIONS,
                f"{who} already have {limit} pictures open for image.segment, the most one app may keep "
                "(CRAFTAI_MAX_SESSIONS_PER_APP): close one (CloseSession) or use SegmentOnce, which keeps nothing; "
                f"unused ones are forgotten after {self.idle_seconds:g} s",
                retry_after=min(self.idle_seconds, 5.0),
                app=app_id,
                limit=str(limit),
            )

    def get(self, app_id: str, session_id: str) -> Session | None:
        """The app's session, marked as used now; None when unknown, another app's, expired or evicted."""
        self.expire()
        session = self._sessions.get(session_id)
        if session is None or session.app_id != app_id:
            self.misses_total += 1
            return None
        self.hits_total += 1
        session.last_used = self._clock()
        self._sessions.move_to_end(session_id)
        return session

    # -- changes -------------------------------------------------------------------------

    def open(
        self,
        app_id: str,
        embedding: Embedding,
        *,
        width: int,
        height: int,
        route: Any,
        device: str,
        tenant: str = "",
        kept: Any = None,
    ) -> Opened:
        """Keep a new picture for `tenant` (the app, where ""), evicting that tenant's least
        recently used sessions until it fits the budget.

        Raises BudgetTooSmallError when one picture exceeds the whole budget, and ServiceError
        (TOO_MANY_SESSIONS) when the tenant has its most sessions open, or when the budget is held by
        other tenants' pictures."""
        tenant = tenant or app_id
        self.check_room(app_id, tenant)
        nbytes = int(embedding.nbytes) + (int(kept.nbytes) if kept is not None else 0)
        if nbytes > self.budget_bytes:
            raise BudgetTooSmallError(nbytes, self.budget_bytes)
        own = [sid for sid, s in self._sessions.items() if s.tenant == tenant]  # least recently used first
        own_bytes = sum(self._sessions[sid].nbytes for sid in own)
        if self._bytes - own_bytes + nbytes > self.budget_bytes:
            raise self._held_by_others(app_id, nbytes)  # nothing evicted for an open that cannot fit
        evicted = 0
        while self._bytes + nbytes > self.budget_bytes:
            self._drop(own[evicted])
            evicted += 1
        if evicted:
            log.info("%d session(s) evicted to keep within the budget of %d bytes", evicted, self.budget_bytes)
        self.evicted_total += evicted
        now = self._clock()
        session_id = secrets.token_urlsafe(18)  # unguessable: an id alone never reaches another app's picture
        if self.replica:  # the token has no dot: the SDK reads the replica after the first one
            session_id = f"{session_id}.{self.replica}"
        session = Session(session_id, app_id, tenant, embedding, width, height, route, device, nbytes, now, now, kept)
        self._sessions[session_id] = session
        self._bytes += nbytes
        self._per_app[app_id] = self._per_app.get(app_id, 0) + 1
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        self.opened_total += 1
        return Opened(session, evicted)

    def _held_by_others(self, app_id: str, nbytes: int) -> ServiceError:
        """The budget is held by other tenants' pictures: when the first of them is forgotten."""
        soonest = min(s.last_used for s in self._sessions.values()) + self.idle_seconds - self._clock()
        self.refused_total += 1
        return resource_exhausted(
            Reason.TOO_MANY_SESSIONS,
            f"this server keeps no more pictures for now: its session budget ({self.budget_bytes / 2**20:,.0f} MiB, "
            f"CRAFTAI_SESSION_BUDGET_BYTES) is held by other apps' open pictures, which your opens never evict, "
            f"and this one needs {nbytes / 2**20:,.1f} MiB; retry when one is closed or forgotten (unused ones "
            f"after {self.idle_seconds:g} s), or use SegmentOnce, which keeps nothing",
            retry_after=max(1.0, min(soonest, 60.0)),
            app=app_id,
        )

    def close(self, app_id: str, session_id: str) -> bool:
        """Forget the app's session; False when it was already gone (or is another app's)."""
        session = self._sessions.get(session_id)
        if session is None or session.app_id != app_id:
            return False
        self._drop(session_id)
        return True

    def expire(self) -> int:
        """Forget the sessions idle for longer than the idle time; returns how many."""
        deadline = self._clock() - self.idle_seconds
        # Oldest use first: stop at the first session used recently enough.
        stale = []
        for session_id, session in self._sessions.items():
            if session.last_used > deadline:
                break
            stale.append(session_id)
        for session_id in stale:
            self._drop(session_id)
        self.expired_total += len(stale)
        return len(stale)

    def clear(self) -> None:
        self._sessions.clear()
        self._per_app.clear()
        self._per_tenant.clear()
        self._bytes = 0

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._bytes -= session.nbytes
        for counts, key in ((self._per_app, session.app_id), (self._per_tenant, session.tenant)):
            left = counts[key] - 1
            if left:
                counts[key] = left
            else:
                del counts[key]

    # -- the periodic sweep --------------------------------------------------------------

    def start_sweeping(self) -> None:
        """Expire idle sessions in the background as well (owned here; `stop` ends it)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="session-sweeper")

    async def _sweep(self) -> None:
        period = min(max(self.idle_seconds / 4, 0.25), 30.0)
        while True:
            await asyncio.sleep(period)
            count = self.expire()
            if count:
                log.info("%d idle session(s) forgotten after %.0f s", count, self.idle_seconds)

    async def stop(self) -> None:
        """End the sweep and forget every session."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self.clear()
