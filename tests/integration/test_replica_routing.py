"""Two real infer replicas on loopback behind one address list (as `--scale infer=2` publishes them,
docs/DEPLOY.md, Scaling), one catalogue, one store: the SDK's routing on both transports (the same
ops and the same craftai.replicas decisions) and through the web gateway, whose sessions are known
by their id alone.

Stateless calls spread (GetRuntime answers which replica served it); a session's prompts reach the
replica that encoded it (a prompt anywhere else would be answered SESSION_NOT_FOUND and open it
again: `reopened`; through the gateway: 404); one replica killed mid-way: no call fails, only its
sessions are opened again, and a session known by its id alone (a gateway's) answers
SESSION_NOT_FOUND, as after an eviction (the page then opens it again). The load, the metrics and
the draining run in containers (tests/containers/test_replicas.py).

Cost: one test on purpose (one kill, no restart, sessions shared by the three clients): the pool's
four processes and the gateway (a few seconds), SAM loaded once per replica, three or four encoder
runs (the SAM fixture's, one thread, ~4 s each on the shared 2-core machine): about 30 s.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from craftai import AiClient, AsyncAiClient, AsyncSegmentSession, CraftAiError
from craftai.replicas import replica_of
from craftai_dev import servers, web
from craftai_dev.clients import LoopThread
from craftai_dev.segment import SetUpStore

APP = "replica-tests"
NAMES = ("infer", "infer-2")  # the replicas' CRAFTAI_REPLICA (servers.separate)
CLICK = (200, 150, True)
POINT = {"x": 200, "y": 150, "foreground": True}  # the same click, as the HTTP API takes it


@pytest.fixture(scope="module")
def pool(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, servers.Process]]:
    workdir = tmp_path_factory.mktemp("replica-pool")
    env = {"CRAFTAI_RECIPES": str(sam_store.recipes), "CRAFTAI_CPU_THREADS": "1"}
    processes = servers.separate(sam_store.store, workdir, env, replicas=2)
    yield processes
    for process in processes.values():
        process.stop()


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


async def _on_both(aio: AsyncAiClient, picture: bytes) -> list[AsyncSegmentSession]:
    """Sessions opened one after another until both replicas keep one (round robin: two or three)."""
    opened: list[AsyncSegmentSession] = []
    while len(opened) < 6 and {s.replica for s in opened} != set(NAMES):
        opened.append(await aio.open_session(picture))
    assert {s.replica for s in opened} == set(NAMES), [s.replica for s in opened]
    return opened


async def _clicks(sessions: list[AsyncSegmentSession]) -> list[bool]:
    """One click on every session at once (the asyncio client's lookups overlap), then two more on
    each in turn (round robin would send one of two calls in a row to the other replica):
    whether each was opened again."""
    answers = await asyncio.gather(*(s.segment(points=[CLICK]) for s in sessions))
    assert [a.session_id for a in answers] == [s.session_id for s in sessions]
    for session in sessions:
        for _ in range(2):
            assert not (await session.segment(points=[CLICK])).reopened, session.replica
    return [a.reopened for a in answers]


def test_sessions_stay_on_their_replica_and_a_replica_killed_loses_no_call(
    pool: dict[str, servers.Process], loop: LoopThread, photos: dict[str, Path], tmp_path: Path
) -> None:
    """AsyncAiClient opens the sessions; the blocking client and the gateway (the same app) prompt
    them by id alone, as a gateway's callers do; then one replica is killed."""
    target = servers.infer_target([pool[name].address for name in NAMES])
    at: dict[str, Any] = {"catalogue": pool["catalogue"].address, "prepare": pool["prepare"].address, "infer": target}
    gateway = web.gateway(pool["catalogue"].address, tmp_path, {"CRAFTAI_WEB_INFER": target})
    headers = {"Authorization": f"Bearer {servers.ensure_local_key()}", "Craftai-App-Id": APP}
    aio = AsyncAiClient(APP, **at)
    try:
        with AiClient(APP, **at) as blocking, httpx.Client(base_url=gateway.address, headers=headers) as http:
            served = Counter(blocking.runtime().replica for _ in range(6))  # stateless: round robin over both
            served += Counter(loop.run(aio.runtime()).replica for _ in range(6))
            assert set(served) == set(NAMES), served

            # Sessions on both replicas; every prompt answered where its picture was encoded.
            sessions = loop.run(_on_both(aio, photos["chelsea.png"].read_bytes()))
            ids = {s.session_id: s.replica for s in sessions}
            assert all(replica_of(i) == r for i, r in ids.items())  # the id names its replica
            assert not any(loop.run(_clicks(sessions)))
            for session_id in ids:  # resumed by id alone: on any other replica, SESSION_NOT_FOUND (404)
                assert not blocking.resume_session(session_id).segment(points=[CLICK]).reopened
                answer = http.post(f"/api/v1/sessions/{session_id}/segment", json={"points": [POINT]}, timeout=60)
                assert answer.status_code == 200, answer.text

            pool[NAMES[1]].kill()  # mid-way: its sessions are gone with it

            for session_id, replica in ids.items():  # known by id alone: nothing to open them again with
                answer = http.post(f"/api/v1/sessions/{session_id}/segment", json={"points": [POINT]}, timeout=60)
                resumed = blocking.resume_session(session_id)
                if replica == NAMES[0]:
                    assert answer.status_code == 200, answer.text
                    assert not resumed.segment(points=[CLICK]).reopened
                else:  # as after an eviction: the page opens the session again on that answer
                    assert answer.status_code == 404 and answer.json()["error"]["reason"] == "SESSION_NOT_FOUND"
                    with pytest.raises(CraftAiError) as raised:
                        resumed.segment(points=[CLICK])
                    assert raised.value.reason == "SESSION_NOT_FOUND"
            lost = [s.replica == NAMES[1] for s in sessions]
            assert loop.run(_clicks(sessions)) == lost  # no error: the lost ones opened again, once
            assert {s.replica for s in sessions} == {NAMES[0]}
            assert {blocking.runtime().replica, loop.run(aio.runtime()).replica} == {NAMES[0]}  # the survivor's
            for session in sessions:
                loop.run(session.close())
    finally:
        loop.run(aio.close())
        assert gateway.stop() == 0, gateway.logs()
