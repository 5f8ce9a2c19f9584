#!/usr/bin/env python3
"""Load test: concurrent clients mixing image.segment sessions, clicks and mattes against one
`craftai serve`, bounded in time, on loopback only (docs/PERFORMANCE.md, "Serving").

Each client is a thread with its own AiClient; clients are spread over `--apps` app ids. A client
repeats, until the time is up: a session (OpenSession, `--clicks` prompts each feeding the last
answer back, CloseSession) or a matte (u2netp), at random with `--matte-share`. The documented
limits (RESOURCE_EXHAUSTED: TOO_MANY_REQUESTS, TOO_MANY_SESSIONS) are counted apart: the client
waits the RetryInfo delay and goes on. Any other error counts as an error (exit code 1).

It reports, per RPC, the count and the p50/p95/p99/max round-trip latencies seen by the clients,
and the server's resident memory sampled every half second against a bound: the memory after the
warm-up (both routes loaded) + the session budget + a stated margin (in-flight pictures, answers,
allocator slack).

    .venv/bin/python -m tools.bench.load                        # 32 clients, 60 s, starts its own server
    .venv/bin/python -m tools.bench.load --seconds 10 --clients 8
    .venv/bin/python -m tools.bench.load --address 127.0.0.1:50051 --server-pid 1234   # a running server

Without --address it makes a temporary store and serves the SAM 2.1 random-weight fixture
(craftai_dev.sam21, the published architecture: the same work per picture) and the real
u2netp (craftai_dev.files) from a loopback HTTP server, pins both in a temporary catalogue,
starts `craftai serve` (CRAFTAI_DEVICE=cpu) and sets both routes up through the prepare service.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from craftai import AiClient, CraftAiError, Retries
from craftai_common.hashing import sha256_file
from craftai_wire.vocabulary import Reason
from tools.bench import harness

REPO = Path(__file__).resolve().parents[2]

MiB = 1 << 20
SAM = "sam2.1-hiera-tiny"  # the default of image.segment: its sessions open without naming it
MATTE = "u2netp"  # named in every matte call: on a GPU the catalogue's default is another recipe
LIMIT_REASONS = (Reason.TOO_MANY_REQUESTS, Reason.TOO_MANY_SESSIONS)
DEFAULT_MARGIN_MIB = 384


# ------------------------------------------------------------------------------------------------
# a server with both routes


@contextlib.contextmanager
def serve_fixture(
    workdir: Path, env: dict[str, str] | None = None, arguments: tuple[str, ...] = ()
) -> Iterator[harness.Served]:
    """`craftai serve` (with `arguments`, e.g. --gpus) on a new store with SAM (fixture) and u2netp
    set up; stopped at the end."""
    from craftai_dev import sam21, segment
    from craftai_dev.files import u2netp_onnx

    fixture = sam21.ensure_fixture()
    files = workdir / "files"
    files.mkdir(parents=True, exist_ok=True)
    for name in segment.ROLE_FILES.values():
        shutil.copyfile(fixture.folder / name, files / name)
    shutil.copyfile(u2netp_onnx(), files / "u2netp.onnx")
    u2netp = {"size": (files / "u2netp.onnx").stat().st_size, "sha256": sha256_file(files / "u2netp.onnx")}
    with harness.files_on_loopback(files) as url:
        pins = {
            SAM: segment.fixture_pins(fixture, url),
            "u2netp": {"network": {**u2netp, "url": f"{url}/u2netp.onnx"}},
        }
        recipes = harness.pinned_catalogue(workdir / "recipes.toml", pins)
        env = {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": "cpu", "CRAFTAI_LOG_LEVEL": "INFO", **(env or {})}
        with harness.serve_process(workdir, env, arguments) as served:
            with AiClient("load-setup", target=served.address) as ai:
                list(ai.setup("image.segment", SAM))
                list(ai.setup("image.matte", MATTE))
            yield served


# ------------------------------------------------------------------------------------------------
# the load


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass
class Tally:
    """What the clients saw; touched by every client thread under `lock`."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    limits: Counter[str] = field(default_factory=Counter)
    reopened: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def took(self, rpc: str, seconds: float) -> None:
        with self.lock:
            self.latencies[rpc].append(seconds)


def _timed(tally: Tally, rpc: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    result = call(*args, **kwargs)
    tally.took(rpc, time.perf_counter() - started)
    return result


def _client_loop(  # noqa: PLR0917 - a thread target: positional by nature
    ai: AiClient,
    pictures: list[bytes],
    deadline: float,
    tally: Tally,
    rng: random.Random,
    matte_share: float,
    clicks: int,
    first_matte: bool,
) -> None:
    first = True
    while time.monotonic() < deadline:
        picture = rng.choice(pictures)
        rpc = "Matte"
        matte = first_matte if first else rng.random() < matte_share
        first = False
        try:
            if matte:
                _timed(tally, "Matte", ai.remove_background, picture, recipe=MATTE)
                continue
            rpc = "OpenSession"
            session = _timed(tally, "OpenSession", ai.open_session, picture)
            try:
                previous = None
                for k in range(clicks):
                    rpc = "Segment"
                    x = session.width * (0.2 + 0.6 * rng.random())
                    y = session.height * (0.2 + 0.6 * rng.random())
                    answer = _timed(
                        tally,
                        "Segment",
                        session.segment,
                        points=[(x, y, True)] if k % 2 == 0 else [(x, y, True), (1.0, 1.0, False)],
                        mask_input=previous,
                        low_res=True,
                    )
                    previous = answer.best.low_res
                    if answer.reopened:
                        with tally.lock:
                            tally.reopened += 1
            finally:
                rpc = "CloseSession"
                _timed(tally, "CloseSession", session.close)
        except CraftAiError as error:
            if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason in LIMIT_REASONS:
                with tally.lock:
                    tally.limits[f"{rpc} {error.reason}"] += 1
                time.sleep(error.retry_after or 1.0)
            else:
                with tally.lock:
                    tally.errors[f"{rpc} {error.code.name} {error.reason or '-'}: {error.message[:120]}"] += 1


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Report:
    seconds: float
    clients: int
    apps: int
    rpcs: dict[str, dict[str, float]]
    errors: dict[str, int]
    limits: dict[str, int]
    reopened: int
    rss_baseline_mib: float
    rss_max_mib: float
    rss_bound_mib: float
    session_budget_mib: float
    margin_mib: float

    @property
    def ok(self) -> bool:
        return not self.errors and (self.rss_bound_mib == 0 or self.rss_max_mib <= self.rss_bound_mib)


def run(
    address: str,
    *,
    seconds: float,
    clients: int,
    apps: int,
    server_pid: int | None,
    pictures: list[bytes],
    matte_share: float = 0.4,
    clicks: int = 3,
    margin_mib: float = DEFAULT_MARGIN_MIB,
    seed: int = 8,
) -> Report:
    """Warm up (both routes loaded), then `clients` threads for `seconds`, then wait for them.
    Even clients begin with a matte and odd ones with a session, so that a short run has both.

    The warm-up sends every picture through both routes, first one at a time, then from `clients`
    threads at once: the threads that run calls side by side (the model's workers and lanes, the
    CPU pool, the engines' own) have made their buffers and arenas before the memory is taken
    as the baseline, which the bound then holds the run to."""

    def warm_up(ai: AiClient, picture: bytes) -> None:
        ai.remove_background(picture, outputs="matte", recipe=MATTE)
        with ai.open_session(picture) as warm:
            warm.segment(points=[(warm.width / 2, warm.height / 2, True)])

    with AiClient("load-warmup", target=address) as ai:
        for picture in pictures:
            warm_up(ai, picture)
        harness.in_threads(lambda i: warm_up(ai, pictures[i % len(pictures)]), clients)
        budget = ai.runtime().limits.session_budget_bytes
    baseline = _rss_bytes(server_pid) if server_pid else 0
    samples = [baseline]
    tally = Tally()
    deadline = time.monotonic() + seconds
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(0.5):
            with contextlib.suppress(OSError):
                samples.append(_rss_bytes(server_pid or 0))

    sampler = threading.Thread(target=sample, daemon=True) if server_pid else None
    client_list = [
        AiClient(f"load-app-{i % apps}", target=address, retries=Retries(attempts=0)) for i in range(clients)
    ]
    threads = [
        threading.Thread(
            target=_client_loop,
            args=(ai, pictures, deadline, tally, random.Random(seed + i), matte_share, clicks, i % 2 == 0),
            daemon=True,
        )
        for i, ai in enumerate(client_list)
    ]
    started = time.monotonic()
    if sampler is not None:
        sampler.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 600)  # the SDK's inference deadline bounds each call
    elapsed = time.monotonic() - started
    stop_sampling.set()
    if sampler is not None:
        sampler.join()
    for ai in client_list:
        ai.close()
    rpcs = {
        rpc: {
            "count": len(values),
            "p50_ms": _percentile(values, 50) * 1000,
            "p95_ms": _percentile(values, 95) * 1000,
            "p99_ms": _percentile(values, 99) * 1000,
            "max_ms": max(values) * 1000,
        }
        for rpc, values in sorted(tally.latencies.items())
    }
    bound = (baseline + budget) / MiB + margin_mib if server_pid else 0.0
    return Report(
        seconds=elapsed,
        clients=clients,
        apps=apps,
        rpcs=rpcs,
        errors=dict(tally.errors),
        limits=dict(tally.limits),
        reopened=tally.reopened,
        rss_baseline_mib=baseline / MiB,
        rss_max_mib=max(samples) / MiB,
        rss_bound_mib=bound,
        session_budget_mib=budget / MiB,
        margin_mib=margin_mib,
    )


def print_report(report: Report) -> None:
    header = f"{'rpc':<14}{'count':>8}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'max ms':>10}"
    print(header)
    print("-" * len(header))
    for rpc, row in report.rpcs.items():
        print(
            f"{rpc:<14}{row['count']:>8.0f}{row['p50_ms']:>10.0f}{row['p95_ms']:>10.0f}"
            f"{row['p99_ms']:>10.0f}{row['max_ms']:>10.0f}"
        )
    print("-" * len(header))
    print(f"{report.clients} clients over {report.apps} apps for {report.seconds:.1f} s")
    print(f"errors (other than the documented limits): {sum(report.errors.values())}")
    for what, count in report.errors.items():
        print(f"  {count} x {what}")
    print(f"documented limits met: {report.limits or 'none'}; sessions reopened by the SDK: {report.reopened}")
    if report.rss_bound_mib:
        print(
            f"server resident memory: {report.rss_baseline_mib:.0f} MiB after warm-up, at most "
            f"{report.rss_max_mib:.0f} MiB during the run; bound {report.rss_bound_mib:.0f} MiB "
            f"(warm-up + session budget {report.session_budget_mib:.0f} MiB + margin {report.margin_mib:.0f} MiB)"
        )


def default_pictures() -> list[bytes]:
    from craftai_dev.samples import photos

    return [photos()[name].read_bytes() for name in ("chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="a running server with both routes set up (default: start one)")
    parser.add_argument("--server-pid", type=int, help="with --address: the server's pid, to sample its memory")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--apps", type=int, default=8, help="app ids the clients are spread over")
    parser.add_argument("--matte-share", type=float, default=0.4, help="share of mattes among the clients' actions")
    parser.add_argument("--clicks", type=int, default=3, help="prompts per session")
    parser.add_argument(
        "--budget-mib", type=int, default=256, help="CRAFTAI_SESSION_BUDGET_BYTES of the server started here"
    )
    parser.add_argument("--margin-mib", type=float, default=DEFAULT_MARGIN_MIB)
    parser.add_argument("--json", type=Path, default=REPO / "out" / "bench" / "load.json")
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 600 or not 0 < args.clients <= 256:
        parser.error("--seconds must be in (0, 600] and --clients in (0, 256]: a bounded run")
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    load = os.getloadavg()
    pictures = default_pictures()
    with contextlib.ExitStack() as stack:
        address, pid = args.address, args.server_pid
        if address is None:
            workdir = Path(tempfile.mkdtemp(prefix="craftai-load-"))
            stack.callback(shutil.rmtree, workdir, True)
            env = {"CRAFTAI_SESSION_BUDGET_BYTES": str(args.budget_mib * MiB), "CRAFTAI_LOG_LEVEL": "WARNING"}
            served = stack.enter_context(serve_fixture(workdir, env))
            address, pid = served.address, served.pid
            print(f"== craftai serve on {address} (pid {pid}), both routes set up", flush=True)
        report = run(
            address,
            seconds=args.seconds,
            clients=args.clients,
            apps=args.apps,
            server_pid=pid,
            pictures=pictures,
            matte_share=args.matte_share,
            clicks=args.clicks,
            margin_mib=args.margin_mib,
        )
    print_report(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "benchmark": "load",
                "date": started_at,
                "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
                "machine": {
                    "cores": os.cpu_count(),
                    "load_average_at_start": [round(v, 2) for v in load],
                    "python": platform.python_version(),
                    "system": platform.platform(),
                },
                "report": {**asdict(report), "ok": report.ok},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written {args.json}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
