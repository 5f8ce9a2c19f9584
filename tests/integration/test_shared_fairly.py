"""Many apps on one server (docs/ARCHITECTURE.md, "Who runs next"): a click stays interactive beside
another app's bulk work, on a real `craftai serve` with the SAM fixture on the CPU.

Each test queues bulk work from one app (session opens: the encoder; segment everything: the grid's
decoder batches) until the server's model queue holds it, then clicks from another app, and checks
the order in which things finished: the click is answered before the bulk work queued ahead of it
(on a first-come, first-served worker it waited for all of it). No wall time is asserted. The
editor has a key of its own (its own tenant); the bulk app a made-up id under the local key (the
tenant of every such id).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from craftai import AiClient
from craftai_dev import servers
from craftai_dev.segment import SetUpStore
from craftai_wire import local_tls
from craftai_wire.keys import new_key

pytestmark = pytest.mark.slow
CLICK = [(200.0, 150.0, True)]
# the other app's session opens: the click is asked once half of them wait for the encoder, so a
# first-come, first-served worker answers it after 3 of them at least (the one running, 2 queued)
OPENS = 4


EDITOR_KEY = new_key()


@pytest.fixture(scope="module")
def server(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    workdir = tmp_path_factory.mktemp("fairly")
    keys = servers.keys_beside_the_local_one(workdir, editor=EDITOR_KEY)
    env = {"CRAFTAI_METRICS_PORT": str(servers.free_port()), "CRAFTAI_KEYS_FILE": str(keys)}
    with servers.running(sam_store.serve(workdir, env)) as process:
        yield process


def _editor(server: servers.Process) -> AiClient:
    """An app with a key of its own (it pins the local server's certificate itself)."""
    return AiClient("editor", target=server.address, app_key=EDITOR_KEY, root_certificates=local_tls.certificate_file())


def _sum(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 where none is yet)."""
    return sum(servers.labelled(samples, name, **labels))


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def test_a_click_is_answered_before_another_apps_queued_session_opens(
    server: servers.Process, photos: dict[str, Path]
) -> None:
    opened: list[float] = []
    lock = threading.Lock()

    def open_one(ai: AiClient) -> None:
        session = ai.open_session(photos["astronaut.png"])
        with lock:
            opened.append(time.monotonic())
        session.close()

    with _editor(server) as editor, AiClient(app_id="batch-tool", target=server.address) as batch:
        picture = editor.open_session(photos["chelsea.png"])
        picture.segment(points=CLICK)  # warm: the decoder's first call
        threads = [threading.Thread(target=open_one, args=(batch,)) for _ in range(OPENS)]
        for thread in threads:
            thread.start()
        _wait_for(
            lambda: _sum(server.metrics(), "craftai_infer_model_queue_depth", recipe="sam2.1-hiera-tiny") >= OPENS / 2,
            "the other app's opens queued for the encoder",
        )
        answer = picture.segment(points=CLICK)
        with lock:
            done_before_the_click = len(opened)
        for thread in threads:
            thread.join(300)
        assert len(opened) == OPENS
    assert not answer.best.empty or answer.best.predicted_iou >= 0  # a real answer
    # First come, first served, the click waited for the open running and every one queued before
    # it (3 or more); interactive first, for the one running at most.
    assert done_before_the_click <= 1, f"the click waited for {done_before_the_click} of {OPENS} opens"
    samples = server.metrics()
    waits = "craftai_infer_queue_wait_seconds_count"
    queue = "sam2.1-hiera-tiny/onnxruntime"
    assert _sum(samples, waits, queue=queue, app="editor", **{"class": "interactive"}) >= 2
    assert _sum(samples, waits, queue=queue, app="*", **{"class": "bulk"}) >= OPENS  # every made-up id: one tenant


def test_a_click_goes_between_another_apps_segment_everything_batches(
    server: servers.Process, photos: dict[str, Path]
) -> None:
    batches = 0
    lock = threading.Lock()

    def counted(_progress: object) -> None:
        nonlocal batches
        with lock:
            batches += 1

    with _editor(server) as editor, AiClient(app_id="batch-tool", target=server.address) as batch:
        picture = editor.open_session(photos["chelsea.png"])
        everything = batch.open_session(photos["coffee.png"])

        def grid() -> None:
            everything.segment_everything(points_per_side=12, points_per_batch=48, on_progress=counted)

        calls = [threading.Thread(target=grid) for _ in range(2)]
        for call in calls:
            call.start()
        _wait_for(lambda: batches >= 2, "the grid's first batches")  # running: its next batches are queued
        with lock:
            before = batches
        picture.segment(points=CLICK)
        with lock:
            during = batches - before
        for call in calls:
            call.join(600)
        total = batches
    # 2 calls x 3 batches of 48 points, each call 2 ahead: first come, first served, the click
    # waited for the 3 or 4 queued before it; interactive first, for the one running at most.
    assert total >= 2 * 3
    assert during <= 1, f"the click waited for {during} grid batches"
