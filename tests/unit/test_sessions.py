"""The session store: budget by embedding bytes (LRU), idle expiry from the last use, app scoping."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from craftai_infer.sessions import BudgetTooSmallError, SessionStore


@dataclass(frozen=True)
class FakeEmbedding:
    nbytes: int


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _open(store: SessionStore, app: str = "app", nbytes: int = 10) -> str:
    opened = store.open(app, FakeEmbedding(nbytes), width=4, height=3, route=None, device="cpu")
    return opened.session.id


def test_the_budget_evicts_the_least_recently_used_of_any_app() -> None:
    store = SessionStore(budget_bytes=30, idle_seconds=60, clock=Clock())
    a, b, c = _open(store, "one"), _open(store, "two"), _open(store, "one")
    assert store.bytes_used == 30 and len(store) == 3
    assert store.get("one", a) is not None  # a is now the most recently used: b is the oldest
    opened = store.open("three", FakeEmbedding(15), width=1, height=1, route=None, device="cpu")
    assert opened.evicted == 2  # b, then c: 10 + 15 fits
    assert store.get("two", b) is None and store.get("one", c) is None and store.get("one", a) is not None
    assert store.bytes_used == 25 and store.evicted_total == 2


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
