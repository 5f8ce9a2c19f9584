"""The session store: budget by embedding bytes (LRU within a tenant), idle expiry from the last use,
app scoping, tenants whose pictures only their own opens evict."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from craftai_common.errors import ServiceError
from craftai_infer.sessions import BudgetTooSmallError, SessionStore


@dataclass(frozen=True)
class FakeEmbedding:
    nbytes: int


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _open(store: SessionStore, app: str = "app", nbytes: int = 10, tenant: str = "") -> str:
    opened = store.open(app, FakeEmbedding(nbytes), width=4, height=3, route=None, device="cpu", tenant=tenant)
    return opened.session.id


def test_the_budget_evicts_the_least_recently_used_of_the_same_app() -> None:
    store = SessionStore(budget_bytes=40, idle_seconds=60, clock=Clock())
    a, b, c, d = _open(store, "one"), _open(store, "two"), _open(store, "one"), _open(store, "one")
    assert store.bytes_used == 40 and len(store) == 4
    assert store.get("one", a) is not None  # a is now the most recently used of app one: c is its oldest
    opened = store.open("one", FakeEmbedding(15), width=1, height=1, route=None, device="cpu")
    assert opened.evicted == 2  # c, then d: 10 + 10 + 15 fits; app two's b is never touched
    assert store.get("one", c) is None and store.get("one", d) is None
    assert store.get("one", a) is not None and store.get("two", b) is not None
    assert store.bytes_used == 35 and store.evicted_total == 2


def test_other_apps_opens_never_evict_an_apps_pictures() -> None:
    """Made-up app ids under a `*` key are one tenant: however many ids, their opens evict only
    their own pictures, and they are refused (with a RetryInfo) when the rest is another app's."""
    clock = Clock()
    store = SessionStore(budget_bytes=40, idle_seconds=60, clock=clock)
    victim = _open(store, "editor", nbytes=20)
    made_up = [_open(store, f"made-up-{n}", tenant="*") for n in range(2)]
    clock.now += 10
    third = _open(store, "made-up-2", tenant="*")  # evicts the tenant's own oldest, made-up-0's
    assert store.get("made-up-0", made_up[0]) is None and store.get("made-up-2", third) is not None
    with pytest.raises(ServiceError) as refused:
        _open(store, "made-up-3", nbytes=25, tenant="*")  # more than the tenant's own 20 bytes
    assert refused.value.reason == "TOO_MANY_SESSIONS" and "other apps' open pictures" in refused.value.message
    assert refused.value.retry_after == 50.0  # the editor's picture is forgotten 60 s after its last use
    assert store.get("editor", victim) is not None and store.refused_total == 1
    assert store.bytes_used == 40


def test_the_session_count_limit_is_per_tenant() -> None:
    store = SessionStore(budget_bytes=1000, idle_seconds=60, clock=Clock(), max_per_app=2)
    _open(store, "made-up-0", tenant="*")
    _open(store, "made-up-1", tenant="*")
    with pytest.raises(ServiceError, match="without a key of their own"):
        _open(store, "made-up-2", tenant="*")
    _open(store, "editor")
    _open(store, "editor")
    with pytest.raises(ServiceError, match="app 'editor' already have 2 pictures"):
        _open(store, "editor")


def test_one_embedding_larger_than_the_budget_is_refused_and_nothing_evicted() -> None:
    store = SessionStore(budget_bytes=30, idle_seconds=60, clock=Clock())
    kept = _open(store)
    with pytest.raises(BudgetTooSmallError, match="needs 31 bytes; the session budget is 30 bytes"):
        _open(store, nbytes=31)
    assert store.get("app", kept) is not None and store.bytes_used == 10


def test_idle_time_counts_from_the_last_use() -> None:
    clock = Clock()
    store = SessionStore(budget_bytes=100, idle_seconds=10, clock=clock)
    used, unused = _open(store), _open(store)
    clock.now += 8
    assert store.get("app", used) is not None
    clock.now += 8  # unused idle 16 s, used idle 8 s
    assert store.get("app", unused) is None
    assert store.get("app", used) is not None
    assert store.expired_total == 1 and store.bytes_used == 10
    clock.now += 10
    assert store.expire() == 1 and len(store) == 0 and store.bytes_used == 0


def test_sessions_are_scoped_by_app_id() -> None:
    store = SessionStore(budget_bytes=100, idle_seconds=10, clock=Clock())
    mine = _open(store, "mine")
    assert store.get("theirs", mine) is None
    assert not store.close("theirs", mine)
    assert store.get("mine", mine) is not None
    assert store.close("mine", mine) and not store.close("mine", mine)
    assert store.get("mine", mine) is None and store.bytes_used == 0


def test_ids_are_unguessable_and_distinct() -> None:
    store = SessionStore(budget_bytes=10_000, idle_seconds=10, clock=Clock())
    ids = {_open(store) for _ in range(100)}
    assert len(ids) == 100 and all(len(i) >= 24 for i in ids)


def test_an_id_names_the_replica_that_keeps_it_as_the_sdk_reads_it() -> None:
    """Sessions known by their id alone (a web gateway's) are routed by it (craftai.replicas)."""
    from craftai.replicas import replica_of

    named = SessionStore(budget_bytes=100, idle_seconds=10, clock=Clock(), replica="infer-7f.pod-2")
    session_id = _open(named)
    assert replica_of(session_id) == "infer-7f.pod-2" and len(session_id.partition(".")[0]) >= 24
    assert named.get("app", session_id) is not None
    assert replica_of(_open(SessionStore(budget_bytes=100, idle_seconds=10, clock=Clock()))) == ""


async def test_the_sweep_forgets_idle_sessions_without_requests_and_stops() -> None:
    store = SessionStore(budget_bytes=100, idle_seconds=0.2)
    _open(store)
    store.start_sweeping()
    try:
        for _ in range(100):
            if not len(store):
                break
            await asyncio.sleep(0.05)
        assert len(store) == 0 and store.bytes_used == 0
        _open(store)
    finally:
        await store.stop()
    assert len(store) == 0  # stopping forgets every session
