"""Clients of the infer replicas, run inside a test container on the stack's network (the craftai
SDK of the image and the standard library only), so that the replicas are reached the way apps on
the network reach them: one DNS name for all of them.

    python replica_load.py CONFIG_JSON

CONFIG: {"infer": "dns:///infer-pool:50051", "catalogue": ..., "prepare": ..., "app_key": ...,
         "apps": [...], "clients": 8, "replicas": 2, "pictures": [paths], "recipe": ..., "engine": ...,
         "phases": [{"name": ..., "clicks": N, "mattes": N, "until": path or null, "wait": path or null}],
         "bench_seconds": 0}

Each client is a thread with its own AiClient (apps taken in turn) and one session on a picture of
its own, opened in the first phase, once its channel has reached every replica (`replicas`). A
phase waits for its `wait` file (when given), then each client does `clicks` prompts on its session
and `mattes` mattes, interleaved; with `until`, it goes on until that file appears, then prompts its
session once more. Every call's outcome is printed as
one JSON line (`{"call": ...}`); at the end of each phase one line `{"phase": ..., "sessions": [...],
"errors": [...]}`. With `bench_seconds`, each client instead opens its session, then prompts it
over and over for that long, then does mattes for that long; one line `{"bench": ..., "kind": ...}`
per kind counts what was answered and the time until the last answer.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from itertools import zip_longest
from pathlib import Path
from typing import Any

from craftai import AiClient, SegmentSession

print_lock = threading.Lock()


def emit(line: dict[str, Any]) -> None:
    with print_lock:
        print(json.dumps(line), flush=True)


class Client:
    def __init__(self, index: int, config: dict[str, Any]) -> None:
        self.index = index
        self.config = config
        self.ai = AiClient(
            config["apps"][index % len(config["apps"])],
            app_key=config["app_key"],
            catalogue=config["catalogue"],
            prepare=config["prepare"],
            infer=config["infer"],
        )
        pictures = config["pictures"]
        self.picture = Path(pictures[index % len(pictures)]).read_bytes()
        self.session: SegmentSession | None = None
        self.errors: list[str] = []
        self.reopened = 0
        self.counts: dict[str, int] = {}  # answered calls by kind

    def _call(self, kind: str, phase: str) -> None:
        started = time.monotonic()
        outcome: dict[str, Any]
        try:
            if kind == "open":
                self.session = self.ai.open_session(self.picture, self.config["recipe"], self.config["engine"])
                outcome = {"replica": self.session.replica}
            elif kind == "click":
                assert self.session is not None
                answer = self.session.segment(points=[(self.session.width / 2, self.session.height / 2, True)])
                self.reopened += int(answer.reopened)
                outcome = {"replica": self.session.replica, "reopened": answer.reopened}
            else:
                self.ai.remove_background(self.picture, outputs="matte", recipe="u2netp", engine="onnxruntime")
                outcome = {}
        except Exception as exc:  # every failure is what the test looks for: recorded, never raised
            self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            outcome = {"error": str(exc)}
        else:
            self.counts[kind] = self.counts.get(kind, 0) + 1
        emit({"call": kind, "phase": phase, "client": self.index, "seconds": time.monotonic() - started, **outcome})

    def phase(self, spec: dict[str, Any]) -> None:
        name = spec["name"]
        if self.session is None:
            self._call("open", name)
        pairs = zip_longest(["click"] * spec.get("clicks", 0), ["matte"] * spec.get("mattes", 0))
        order = [kind for pair in pairs for kind in pair if kind]
        until = Path(spec["until"]) if spec.get("until") else None
        step = 0
        while step < len(order) or (until is not None and not until.exists()):
            self._call(order[step % len(order)] if order else "click", name)
            step += 1
        if until is not None:
            self._call("click", name)  # every session prompted once after the file appeared

    def reach(self, replicas: int, tries: int = 40) -> None:
        """Cheap calls (GetRuntime) until `replicas` replicas have answered on this client's
        channel, so that the sessions opened next are dealt over all of them: the channel's first
        calls all go to the replica whose connection was ready first, and a session stays where
        it was opened (docs/DEPLOY.md, Scaling)."""
        seen: set[str] = set()
        for _ in range(tries):
            seen.add(self.ai.runtime().replica)
            if len(seen) >= replicas:
                return
            time.sleep(0.05)

    def bench(self, kind: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        self.counts = {}
        while time.monotonic() < deadline:
            self._call(kind, "bench")


def run_all(clients: list[Client], work: Any) -> None:
    threads = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    config = json.loads(sys.argv[1])
    clients = [Client(i, config) for i in range(config["clients"])]
    if config.get("replicas", 1) > 1:
        run_all(clients, lambda c: c.reach(config["replicas"]))
    if config.get("bench_seconds"):
        seconds = float(config["bench_seconds"])
        run_all(clients, lambda c: c._call("open", "warm-up"))
        run_all(clients, lambda c: c._call("matte", "warm-up"))
        for kind in ("click", "matte"):
            started = time.monotonic()
            run_all(clients, lambda c, kind=kind: c.bench(kind, seconds))
            emit(
                {
                    "bench": config["infer"],
                    "kind": kind,
                    "seconds": time.monotonic() - started,
                    "answered": sum(c.counts.get(kind, 0) for c in clients),
                    "errors": [e for c in clients for e in c.errors],
                }
            )
    for spec in config.get("phases", []):
        if spec.get("wait"):
            while not Path(spec["wait"]).exists():
                time.sleep(0.1)
        emit({"started": spec["name"]})
        run_all(clients, lambda c, spec=spec: c.phase(spec))
        emit(
            {
                "phase": spec["name"],
                "sessions": [
                    {"client": c.index, "replica": c.session.replica if c.session else "", "reopened": c.reopened}
                    for c in clients
                ],
                "errors": [e for c in clients for e in c.errors],
            }
        )
        for c in clients:
            c.errors.clear()
            c.reopened = 0
    for c in clients:
        if c.session is not None:
            c.session.close()
        c.ai.close()
    emit({"done": True})


if __name__ == "__main__":
    main()
