"""Interactive beside bulk: one app's clicks and small mattes alone, then beside other apps' bulk
work (session opens, segment everything, large cutouts), on one `craftai serve`; and the server's
memory before, at its peak and 30 s after (docs/PERFORMANCE.md, "Shared fairly").

The interactive app ("editor", a key of its own) clicks on an open session (SAM) and removes the
background of a small picture (u2netp: the matte and the cutout), one at a time, `--rounds` times
alone, then as many times while `--encoders` threads of another app open sessions,
`--everything` threads run segment everything (Meta's defaults, `--points-per-side`) and
`--large` threads ask for cutouts of a large picture and `--videos` threads stream a made clip's
`--video-size` frames through MatteFrames (bulk work: docs/ARCHITECTURE.md, "Who runs next");
the bulk apps use made-up ids under the local key (one tenant), each in a process of its own as
other apps are (`--bulk-in-process`: threads beside the editor's, where their clients' work shares
the editor's interpreter and its lock and lengthens its calls on the client's side: how the bench
ran before). It reports each interactive call's p50/p99 alone and loaded and their ratio
(targets on the 2-core machine: a click's p99 loaded <= 3x alone, a matte's <= 2x), the stage
times each answer reports (where a loaded call waited: a stage includes its queue), what the bulk
clients got done, and the server's resident memory after the warm-up, at its peak and `--settle` seconds after the load.

    .venv/bin/python -m tools.bench.interactive                     # the 2-core machine's figures
    .venv/bin/python -m tools.bench.interactive --device cuda --encoders 32 --everything 8 --large 0
    python3 -m tools.bench.interactive --device cuda --encoders 0 --everything 0 --large 0 --videos 1   # a 1080p video
                                                                    # (both routes on torch there)

Without --address it starts `craftai serve` on a temporary store with the SAM 2.1 random-weight
fixture (the published architecture: the same work per picture) and the real u2netp
(tools/bench/load.py `serve_fixture`); with --gpus, `craftai serve --gpus` (one infer replica a GPU
named, each a process of its own; every app reaches them through one target, or with --apart the
editor the first replica alone and the other apps the rest, as docs/DEPLOY.md serves interactive and
bulk apps on one GPU; the model calls are added up over the replicas' metrics).

    .venv/bin/python -m tools.bench.interactive --device cuda --encoders 32 --everything 8 --large 0 \
        --gpus 0 --replicas-per-gpu 2 --apart                  # two processes on GPU 0, the editor's apart
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import json
import multiprocessing
import os
import platform
import queue
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from craftai import AiClient, CraftAiError, Retries
from craftai_dev.files import sample_photo
from craftai_dev.servers import ensure_local_key, free_ports_in_a_row, infer_target
from craftai_wire import local_tls
from craftai_wire.keys import key_line, new_key
from craftai_wire.vocabulary import Reason
from tools.bench import harness
from tools.bench.load import MATTE, SAM, serve_fixture

MiB = 1 << 20
CLICK = [(200.0, 150.0, True)]
PROFILE_SECONDS = 20  # py-spy's recording, from the first loaded call (the loaded phase lasts longer)
VIDEO_FRAMES = 48  # a video app streams this many frames of a made clip, then again


@dataclass
class Phase:
    """One interactive app's latencies in a phase, by call."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"click": [], "matte": []})
    # each answer's own stage times (ms, as the server measured them: a stage includes its queue)
    stages: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {"click": [], "matte": []})

    def summary(self) -> dict[str, dict[str, float]]:
        return {call: harness.percentiles(times) for call, times in self.latencies.items()}

    def stage_summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """By call, by server stage: p50 and p99 in ms."""
        found: dict[str, dict[str, dict[str, float]]] = {}
        for call, answers in self.stages.items():
            names = sorted({name for timing in answers for name in timing})
            found[call] = {}
            for name in names:
                stats = harness.percentiles([timing.get(name, 0.0) for timing in answers])
                found[call][name] = {k: round(stats[k], 1) for k in ("p50", "p99")}
        return found


@dataclass
class Memory:
    """The server's resident memory (MiB): after the warm-up, at its peak, `settle` s after."""

    warm: float = 0.0
    peak: float = 0.0
    after: float = 0.0
    settle: float = 0.0


def _status(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _interactive(
    editor: AiClient, session: Any, small: bytes, rounds: int, phase: Phase, *, engine: str | None
) -> None:
    """The editor's loop: a click, then a small matte with its cutout, `rounds` times."""
    for _ in range(rounds):
        started = time.perf_counter()
        click = session.segment(points=CLICK)
        phase.latencies["click"].append(time.perf_counter() - started)
        phase.stages["click"].append(dict(click.timing_ms))
        started = time.perf_counter()
        matte = editor.remove_background(small, outputs="matte,cutout", recipe=MATTE, engine=engine)
        phase.latencies["matte"].append(time.perf_counter() - started)
        phase.stages["matte"].append(dict(matte.timing_ms))


@dataclass
class Bulk:
    """The other apps' threads and what they got done."""

    done: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def run(self, name: str, work: Callable[[], None]) -> None:
        def loop() -> None:
            while not self.stop.is_set():
                try:
                    work()
                    kind = "done"
                except CraftAiError as exc:
                    kind = exc.reason or exc.code.name
                with self.lock:
                    (self.done if kind == "done" else self.refused)[name if kind == "done" else kind] += 1

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(600)


def _open_and_close(ai: AiClient, picture: bytes, engine: str | None) -> None:
    ai.open_session(picture, engine=engine).close()


def _kept_session(ai: AiClient, picture: bytes, engine: str | None, patience: float = 120.0) -> Any:
    """A session opened, trying again while the tenant's sessions are all taken (other apps'
    encoders open and close theirs all the time)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return ai.open_session(picture, engine=engine)
        except CraftAiError as exc:
            if exc.reason != Reason.TOO_MANY_SESSIONS or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _everything(session: Any, points_per_side: int) -> None:
    session.segment_everything(points_per_side=points_per_side)


def _cutout(ai: AiClient, picture: bytes, engine: str | None) -> None:
    ai.remove_background(picture, outputs="cutout", recipe=MATTE, engine=engine)


def _video(ai: AiClient, frames: list[Any], engine: str | None) -> None:
    """One stream of a clip's raw frames (MatteFrames), every answer read: a video app's work."""
    for _ in ai.remove_background_frames(frames, outputs="cutout", recipe=MATTE, engine=engine):
        pass


@dataclass(frozen=True)
class Target:
    """Where the apps call: the server's address, and its infer replicas' addresses where it runs
    several (`--gpus`; none: infer at the address). `apart`: the editor reaches the first replica
    alone and the other apps the rest, as an operator would point interactive and bulk apps at
    different replicas' ports; otherwise every app reaches all of them (gRPC's round robin)."""

    address: str
    replicas: tuple[str, ...] = ()
    apart: bool = False

    def client(self, app_id: str, *, interactive: bool = False, **options: Any) -> AiClient:
        """A client whose channel reaches each of its replicas before it returns: gRPC's round robin
        deals only over the connections ready, so a new client's first calls would all go to one."""
        reached = self.replicas
        if self.apart:
            reached = self.replicas[:1] if interactive else self.replicas[1:]
        infer = infer_target(list(reached)) if reached else None
        ai = AiClient(app_id, target=self.address, infer=infer, **options)
        if len(reached) > 1:
            _every_replica_serves(ai, len(reached))
        return ai


@dataclass(frozen=True)
class BulkApp:
    """One other app's share of the bulk threads (what its process runs)."""

    name: str
    encoders: int
    everything: int
    large: int
    videos: int = 0


def _bulk_apps(args: argparse.Namespace, apps: int = 4) -> list[BulkApp]:
    """The bulk threads dealt to `apps` apps in turn."""

    def share(total: int, n: int) -> int:
        return len(range(n, total, apps))

    return [
        BulkApp(
            f"bulk-{n}", share(args.encoders, n), share(args.everything, n), share(args.large, n), share(args.videos, n)
        )
        for n in range(apps)
    ]


def _bulk_app(
    target: Target,
    app: BulkApp,
    work: tuple[bytes, bytes, str | None, int, tuple[int, int]],
    *,
    ready: Any,
    stop: Any,
    results: Any,
) -> None:
    """One other app in a process of its own (as other apps are: its client's work does not share
    the editor's interpreter): its threads run until `stop`, then it reports what they got done."""
    photo, large, engine, points_per_side, video_size = work
    ai = target.client(app.name, retries=Retries(attempts=0))
    bulk = Bulk()
    try:
        try:
            # the sessions segment everything keeps first: other apps' encoders may hold the wildcard
            # tenant's sessions for a moment (TOO_MANY_SESSIONS), and each opens again when they close
            grids = [_kept_session(ai, photo, engine) for _ in range(app.everything)]
            for _ in range(app.encoders):
                bulk.run("open", functools.partial(_open_and_close, ai, photo, engine))
            for grid in grids:
                bulk.run("everything", functools.partial(_everything, grid, points_per_side))
            for _ in range(app.large):
                bulk.run("large cutout", functools.partial(_cutout, ai, large, engine))
            if app.videos:
                from craftai_dev.clips import moving_frames

                frames = moving_frames(video_size, VIDEO_FRAMES)
                for _ in range(app.videos):
                    bulk.run(f"video ({VIDEO_FRAMES} frames)", functools.partial(_video, ai, frames, engine))
        except BaseException as exc:
            ready.put(f"{app.name} did not start: {exc!r}")
            raise
        ready.put("")
        stop.wait()
    finally:
        bulk.end()
        ai.close()
    results.put((dict(bulk.done), dict(bulk.refused)))


class OtherApps:
    """The other apps, each in a process of its own (`apart`; else threads of this process, as
    the bench ran before); `end` stops them and adds up their work."""

    def __init__(
        self,
        target: Target,
        apps: list[BulkApp],
        work: tuple[bytes, bytes, str | None, int, tuple[int, int]],
        *,
        apart: bool,
    ) -> None:
        self._ready: Any
        self._results: Any
        self._stop: Any
        if apart:
            context = multiprocessing.get_context("spawn")
            self._ready, self._results, self._stop = context.Queue(), context.Queue(), context.Event()
            start: Callable[..., Any] = functools.partial(context.Process, daemon=True)
        else:
            self._ready, self._results, self._stop = queue.Queue(), queue.Queue(), threading.Event()
            start = functools.partial(threading.Thread, daemon=True)
        self._runners = [
            start(
                target=_bulk_app,
                args=(target, app, work),
                kwargs={"ready": self._ready, "stop": self._stop, "results": self._results},
                name=app.name,
            )
            for app in apps
            if app.encoders or app.everything or app.large or app.videos
        ]
        for runner in self._runners:
            runner.start()
        for _ in self._runners:  # every app's threads started before the editor's loaded phase
            if failed := self._ready.get(timeout=300):
                self._stop.set()
                raise RuntimeError(failed)

    def end(self) -> tuple[Counter[str], Counter[str]]:
        self._stop.set()
        done: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        for _ in self._runners:
            got, lost = self._results.get(timeout=600)
            done.update(got)
            refused.update(lost)
        for runner in self._runners:
            runner.join(60)
        return done, refused


def model_calls(metrics_urls: list[str]) -> dict[str, Any]:
    """From the server's /metrics (each replica's, added up): each model call's mean duration and
    its count by route, operation and class, and the interactive jobs' waits for each queue, with
    the share under each bucket bound; and each replica's tenants (which apps reached it)."""
    texts = []
    for url in metrics_urls:
        with urllib.request.urlopen(url, timeout=10) as reply:
            texts.append(reply.read().decode())
    calls: dict[str, dict[str, Any]] = {}
    apps_by_replica: list[list[str]] = []
    for text in texts:
        apps: set[str] = set()  # the tenants whose jobs this replica queued: which apps reached it
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                waited = family.name == "craftai_infer_queue_wait_seconds" and sample.name.endswith("_count")
                if waited and sample.value > 0:
                    apps.add(labels["app"])
                if family.name == "craftai_infer_model_call_seconds":
                    key = f"{labels['queue']} {labels['operation']} {labels['class']}"
                elif family.name == "craftai_infer_queue_wait_seconds" and labels.get("class") == "interactive":
                    key = f"{labels['queue']} queue wait interactive {labels['app']}"
                else:
                    continue
                # one histogram's samples added up under its key (each label set once a replica)
                entry = calls.setdefault(key, {"count": 0.0, "sum_ms": 0.0, "under_ms": {}})
                if sample.name.endswith("_count"):
                    entry["count"] += sample.value
                elif sample.name.endswith("_sum"):
                    entry["sum_ms"] += sample.value * 1000
                elif sample.name.endswith("_bucket") and labels["le"] != "+Inf":
                    bound = str(float(labels["le"]) * 1000)
                    entry["under_ms"][bound] = entry["under_ms"].get(bound, 0.0) + sample.value
        apps_by_replica.append(sorted(apps))
    for entry in calls.values():
        count = entry["count"] or 1.0
        entry["mean_ms"] = entry.pop("sum_ms") / count
        entry["under_ms"] = {bound: round(n / count, 4) for bound, n in entry["under_ms"].items()}
    return {"calls": calls, "apps_by_replica": apps_by_replica}


@contextlib.contextmanager
def _server(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[Target, int, str, list[str]]]:
    """(where to call, the pid of `craftai serve`, the editor's key, the metrics URLs of its infer
    replicas): the given server, or one started with the fixtures (`--gpus`: one infer replica a
    GPU named, each a process of its own)."""
    if args.address:
        yield Target(args.address), args.server_pid, args.editor_key, []
        return
    key = new_key()
    keys = workdir / "keys"
    keys.write_text(key_line("editor", key) + key_line("*", ensure_local_key()))  # the bulk apps: made-up ids
    keys.chmod(0o600)
    # the bulk apps share the '*' key's limit on requests in progress: room for all of their threads
    bulk = args.encoders + args.everything + args.large + args.videos
    replicas = len(args.gpus.split(",")) * args.replicas_per_gpu if args.gpus else 1
    metrics = free_ports_in_a_row(replicas)  # a replica's ports: the first's plus its rank
    env = {
        "CRAFTAI_KEYS_FILE": str(keys),
        "CRAFTAI_DEVICE": args.device,
        "CRAFTAI_MAX_WILDCARD_REQUESTS": str(max(32, 2 * bulk)),
        "CRAFTAI_METRICS_PORT": str(metrics),
    }
    addresses: tuple[str, ...] = ()
    if args.gpus:
        port = free_ports_in_a_row(replicas)
        env["CRAFTAI_PORT"] = str(port)
        addresses = tuple(f"127.0.0.1:{port + rank}" for rank in range(replicas))
    if args.apart and replicas < 2:
        raise SystemExit("--apart needs two infer replicas or more (--gpus, --replicas-per-gpu)")
    arguments = ("--gpus", args.gpus, "--replicas-per-gpu", str(args.replicas_per_gpu)) if args.gpus else ()
    with serve_fixture(workdir, env, arguments) as served:
        target = Target(served.address, addresses, apart=args.apart)
        with target.client("load-setup") as ai:
            if args.engine:  # the default engines are set up; this one too
                list(ai.setup("image.segment", SAM, args.engine))
                list(ai.setup("image.matte", MATTE, args.engine))
        urls = [f"http://127.0.0.1:{metrics + rank}/metrics" for rank in range(replicas)]
        yield target, served.pid, key, urls


def _every_replica_serves(ai: AiClient, replicas: int, patience: float = 300.0) -> None:
    """Waits for every infer replica to answer (`craftai serve` starts the others after its own)."""
    seen: set[str] = set()
    deadline = time.monotonic() + patience
    while len(seen) < replicas:
        with contextlib.suppress(CraftAiError):
            seen.add(ai.runtime().replica)
        if time.monotonic() > deadline:
            raise SystemExit(f"only {sorted(seen)} of {replicas} infer replicas answered")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    photo = sample_photo("astronaut.png").read_bytes()
    small = sample_photo("chelsea.png").read_bytes()  # 451x300: interactive
    with Image.open(sample_photo("coffee.png")) as coffee:
        large = _png(coffee.convert("RGB").resize((args.large_side, args.large_side * 3 // 4)))  # bulk
    with harness.scratch("craftai-interactive-") as workdir, _server(args, workdir) as (target, pid, key, metrics):
        no_retry = Retries(attempts=0)
        certificate = local_tls.certificate_file() if not args.address else None
        editor = target.client("editor", interactive=True, app_key=key, root_certificates=certificate, retries=no_retry)
        setup = target.client("bulk-setup", retries=no_retry)
        try:
            engine = args.engine or None
            session = editor.open_session(photo, engine=engine)
            warm = Phase()
            _interactive(editor, session, small, 3, warm, engine=engine)  # both routes loaded and warm
            session.segment_everything(points_per_side=8)  # the grid's path warm too (no encoder run more)
            setup.remove_background(large, outputs="cutout", recipe=MATTE, engine=engine)
            memory = Memory(warm=_status(pid, "VmRSS") if pid else 0.0)
            if pid:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            alone = Phase()
            _interactive(editor, session, small, args.rounds, alone, engine=engine)
            work = (photo, large, engine, args.points_per_side, args.video_size)
            others = OtherApps(target, _bulk_apps(args), work, apart=not args.bulk_in_process)
            time.sleep(args.ramp)  # the bulk work queued before the first interactive call
            spies = _spy(pid, args.profile)
            loaded = Phase()
            started = time.monotonic()
            _interactive(editor, session, small, args.rounds, loaded, engine=engine)
            loaded_seconds = time.monotonic() - started
            profiles = _spied(spies, args.profile)
            bulk_done, bulk_refused = others.end()
            calls = model_calls(metrics) if metrics else {}
            if pid:
                memory.peak = _status(pid, "VmHWM")
                time.sleep(args.settle)
                memory.after, memory.settle = _status(pid, "VmRSS"), args.settle
        finally:
            for ai in (editor, setup):
                ai.close()
    ratios = {call: loaded.summary()[call]["p99"] / alone.summary()[call]["p99"] for call in ("click", "matte")}
    return {
        "bench": "interactive",
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.system()}",
        "device": args.device,
        "engine": args.engine or "the catalogue's",
        "arguments": {k: v for k, v in vars(args).items() if k not in ("json", "editor_key", "profile")},
        "alone_ms": _ms(alone.summary()),
        "loaded_ms": _ms(loaded.summary()),
        "p99_loaded_over_alone": ratios,
        "server_stages_ms": {"alone": alone.stage_summary(), "loaded": loaded.stage_summary()},
        "loaded_seconds": loaded_seconds,
        "bulk_done": dict(bulk_done),
        "bulk_refused": dict(bulk_refused),
        "model_calls": calls,  # the whole run's (warm-up, alone and loaded)
        "memory_mib": asdict(memory),
        "memory_after_over_warm": memory.after / memory.warm if memory.warm else None,
        "profiles": profiles,
    }


def _spy(pid: int, folder: Path | None) -> list[subprocess.Popen[bytes]]:
    """py-spy on the server while the clicks run beside the bulk work (every thread, and the
    interpreter lock's holder), where it is installed (tools/gpu/pyspy.py) and asked for."""
    from tools.gpu import pyspy

    if folder is None or not pid:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    spies = [pyspy.record(pid, PROFILE_SECONDS, folder, gil) for gil in (False, True)]
    return [s for s in spies if s is not None]


def _spied(spies: list[subprocess.Popen[bytes]], folder: Path | None) -> dict[str, Any]:
    """What the py-spy recordings saw, once they have ended."""
    from tools.gpu import pyspy

    for spy in spies:
        spy.wait(timeout=PROFILE_SECONDS + 30)
    return pyspy.summaries(folder) if folder is not None and spies else {}


def _size(text: str) -> tuple[int, int]:
    width, height = (int(v) for v in text.lower().split("x"))
    return width, height


def _ms(summary: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        call: {k: v if k == "n" else round(v * 1000, 1) for k, v in stats.items()} for call, stats in summary.items()
    }


def report(result: dict[str, Any]) -> str:
    lines = [f"interactive beside bulk ({result['machine']}, {result['device']}, {result['when']})"]
    for call in ("click", "matte"):
        a, b = result["alone_ms"][call], result["loaded_ms"][call]
        lines.append(
            f"  {call:5}  alone p50 {a['p50']:8.1f} ms  p99 {a['p99']:8.1f} ms   loaded p50 {b['p50']:8.1f} ms  "
            f"p99 {b['p99']:8.1f} ms   p99 loaded/alone {result['p99_loaded_over_alone'][call]:.2f}x"
        )
    for phase in ("alone", "loaded"):
        stages = result["server_stages_ms"][phase]["click"]
        said = ", ".join(f"{name} p50 {v['p50']:.1f} p99 {v['p99']:.1f}" for name, v in stages.items())
        lines.append(f"  click on the server, {phase} (ms; a stage includes its queue): {said}")
    lines.append(f"  bulk done while loaded: {result['bulk_done']}  refused: {result['bulk_refused']}")
    m = result["memory_mib"]
    lines.append(
        f"  memory: warm {m['warm']:.0f} MiB, peak {m['peak']:.0f} MiB, {m['settle']:.0f} s after {m['after']:.0f} MiB "
        f"({(result['memory_after_over_warm'] or 0) * 100 - 100:+.1f}% of warm)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="a running server with both routes set up (default: start one)")
    parser.add_argument("--server-pid", type=int, default=0, help="with --address: its pid, to read its memory")
    parser.add_argument("--editor-key", default="", help="with --address: the key of the app 'editor'")
    parser.add_argument("--device", default="cpu", help="the started server's CRAFTAI_DEVICE (cpu, cuda)")
    parser.add_argument(
        "--gpus", default="", help="the started server's `craftai serve --gpus` (default: one infer in its process)"
    )
    parser.add_argument("--replicas-per-gpu", type=int, default=1, help="with --gpus: `craftai serve`'s")
    parser.add_argument(
        "--apart",
        action="store_true",
        help="with two replicas or more: the editor on the first alone, the other apps on the rest",
    )
    parser.add_argument(
        "--engine", default="", help="both routes' engine, set up too (default: the catalogue's; on a GPU: torch)"
    )
    parser.add_argument("--rounds", type=int, default=30, help="clicks and small mattes, alone and loaded")
    parser.add_argument("--encoders", type=int, default=8, help="threads opening sessions (the encoder)")
    parser.add_argument("--everything", type=int, default=4, help="threads running segment everything")
    parser.add_argument("--points-per-side", type=int, default=32)
    parser.add_argument("--large", type=int, default=2, help="threads asking for cutouts of a large picture")
    parser.add_argument("--large-side", type=int, default=2400, help="the large picture's width (4:3)")
    parser.add_argument("--videos", type=int, default=0, help="threads streaming a clip's frames (MatteFrames)")
    parser.add_argument(
        "--video-size", type=_size, default=(1920, 1080), help="the streamed frames' WIDTHxHEIGHT (default 1920x1080)"
    )
    parser.add_argument(
        "--bulk-in-process",
        action="store_true",
        help="the other apps' threads in this process, beside the editor's (default: a process each)",
    )
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds of bulk work before the first call")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after the load to read the memory")
    parser.add_argument("--json", type=Path, default=harness.REPO / "out" / "bench" / "interactive.json")
    parser.add_argument(
        "--profile", type=Path, default=None, help="a folder: py-spy records the server there during the load"
    )
    args = parser.parse_args(argv)
    if not args.engine and args.device.startswith("cuda"):
        args.engine = "torch"  # onnxruntime's routes run on the CPU beside a GPU
    result = measure(args)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    print(f"raw: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
