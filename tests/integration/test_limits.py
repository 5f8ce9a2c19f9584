"""Per-app limits on a real server: one app flooding cannot starve another.

`craftai serve` with u2netp and CRAFTAI_MAX_REQUESTS_PER_APP=2. A flooding app keeps 12 threads
sending mattes; past its 2 calls in progress it is told RESOURCE_EXHAUSTED / TOO_MANY_REQUESTS with
a RetryInfo. A quiet app meanwhile gets every answer, each within a bound set from its own time
alone (it waits behind at most the flooder's 2 calls, not behind 12)."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from craftai import AiClient, CraftAiError, Retries
from craftai_dev import servers

pytestmark = pytest.mark.slow
LIMIT = 2
FLOODERS = 12
T = TypeVar("T")


@pytest.fixture(scope="module")
def server(local_catalogue: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    workdir = tmp_path_factory.mktemp("limits")
    env = {"CRAFTAI_RECIPES": str(local_catalogue), "CRAFTAI_MAX_REQUESTS_PER_APP": str(LIMIT)}
    with servers.running(servers.embedded(workdir / "store", workdir, env)) as process:
        with AiClient("setup", target=process.address) as ai:
            list(ai.setup("image.matte", "u2netp"))
        yield process


class Flood:
    """Threads sending mattes as fast as they are answered or refused (greedy: after a refusal,
    far sooner than its RetryInfo asks), one per client given; counts what they got."""

    def __init__(self, clients: Sequence[AiClient], picture: bytes) -> None:
        self.clients, self.picture = clients, picture
        self.answered = [0]
        self.refusals: list[CraftAiError] = []
        self.other_errors: list[CraftAiError] = []
        self._stop = threading.Event()

    def _flooding(self, ai: AiClient) -> None:
        while not self._stop.is_set():
            try:
                ai.remove_background(self.picture, outputs="matte")
                self.answered[0] += 1
            except CraftAiError as error:
                if error.reason == "TOO_MANY_REQUESTS":
                    self.refusals.append(error)
                    time.sleep(0.05)
                else:
                    self.other_errors.append(error)

    @contextlib.contextmanager
    def running(self, settle: float = 1.0) -> Iterator[Flood]:
        threads = [threading.Thread(target=self._flooding, args=(ai,), daemon=True) for ai in self.clients]
        for thread in threads:
            thread.start()
        try:
            time.sleep(settle)
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(timeout=120)


def timed(call: Callable[[], T], times: int) -> tuple[list[float], list[T]]:
    """Seconds each of `times` calls took, and what each answered."""
    took, answers = [], []
    for _ in range(times):
        started = time.perf_counter()
        answers.append(call())
        took.append(time.perf_counter() - started)
    return took, answers


def test_one_app_flooding_cannot_starve_another(server: servers.Process, photos: dict[str, Path]) -> None:
    picture = photos["chelsea.png"].read_bytes()
    quiet = AiClient("quiet-app", target=server.address, retries=Retries(attempts=0))
    flood = AiClient("flood-app", target=server.address, retries=Retries(attempts=0))
    with quiet, flood:
        quiet.remove_background(picture, outputs="matte")  # warm: the model is loaded once
        alone, _ = timed(lambda: quiet.remove_background(picture, outputs="matte"), 3)
        with Flood([flood] * FLOODERS, picture).running() as flooding:
            during, answers = timed(lambda: quiet.remove_background(picture, outputs="matte"), 4)
    assert all(answer.width == 451 for answer in answers)
    answered, refusals, other_errors = flooding.answered, flooding.refusals, flooding.other_errors

    assert not other_errors, other_errors[:3]
    assert answered[0] > 0 and refusals
    refusal = refusals[0]
    assert refusal.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refusal.retry_after == 1.0
    assert f"already has {LIMIT} requests in progress" in refusal.message
    assert "CRAFTAI_MAX_REQUESTS_PER_APP" in refusal.message
    # Behind at most LIMIT of the flooder's calls on the one model worker, plus its own: a bound
    # with room for the shared CPUs (the flooder's refusals cost CPU too).
    bound = 4 * (LIMIT + 1) * statistics.median(alone) + 5.0
    assert max(during) < bound, (during, alone)
    assert '"code": "RESOURCE_EXHAUSTED"' in server.logs()
