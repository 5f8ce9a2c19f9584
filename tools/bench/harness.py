"""What the benchmarks share: a real `craftai serve` on a temporary store, files served on
loopback for its prepare service, and catalogues pinning test files (random-weight fixtures)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import tomli_w
from PIL import Image

REPO = Path(__file__).resolve().parents[2]

T = TypeVar("T")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A work folder (store, catalogue, copied files) removed when the measure ends, even on a
    failure: a served store holds hundreds of MB and the test suite runs these benches often."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)


@contextlib.contextmanager
def files_on_loopback(folder: Path) -> Iterator[str]:
    """A plain HTTP server for one folder on 127.0.0.1 (the prepare service downloads from it)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def pinned_catalogue(path: Path, pins: dict[str, dict[str, dict[str, Any]]]) -> Path:
    """The packaged recipe data with some recipes' files pinned to other bytes.

    pins: recipe -> file role -> {"size", "sha256", "url"}.
    """
    from craftai_catalogue.recipes import DATA_FILE

    data = tomllib.loads(DATA_FILE.read_text())
    for recipe in data["recipes"]:
        for pinned in recipe.get("files", []):
            new = pins.get(recipe["name"], {}).get(pinned["role"])
            if new is not None:
                pinned.update(size=new["size"], sha256=new["sha256"], sources=[{"url": new["url"]}])
    path.write_text(tomli_w.dumps(data))
    return path


@dataclass(frozen=True)
class Served:
    address: str
    pid: int
    log: Path


@contextlib.contextmanager
def serve_process(workdir: Path, env: dict[str, str], arguments: Sequence[str] = ()) -> Iterator[Served]:
    """`craftai serve` (as `python -m craftai.cli`, so it runs wherever the packages import) on
    `workdir/store`, with `arguments` (e.g. --gpus); yields its address and process, and stops it
    with SIGTERM at the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "address"
    ready.unlink(missing_ok=True)
    full = {
        **os.environ,
        "CRAFTAI_HOST": "127.0.0.1",
        "CRAFTAI_PORT": "0",
        "CRAFTAI_STORE": str(workdir / "store"),
        "CRAFTAI_READY_FILE": str(ready),
        "CRAFTAI_LOG_LEVEL": "WARNING",
        **env,
    }
    log = workdir / "serve.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "craftai.cli", "serve", *arguments], env=full, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"craftai serve did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield Served(ready.read_text().strip(), process.pid, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def serve(workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """serve_process, for callers that need only the address."""
    with serve_process(workdir, env) as served:
        yield served.address


@contextlib.contextmanager
def entered_together(*managers: contextlib.AbstractContextManager[T]) -> Iterator[list[T]]:
    """Several context managers entered at once, each on a thread of its own (servers that start side
    by side rather than one after the other); those entered are exited in reverse order, also when
    another failed to enter."""
    from concurrent.futures import ThreadPoolExecutor

    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(max(1, len(managers))) as pool:
            futures = [pool.submit(manager.__enter__) for manager in managers]
            values: list[T] = []
            failed: BaseException | None = None
            for manager, future in zip(managers, futures, strict=True):
                try:
                    values.append(future.result())
                except BaseException as exc:
                    failed = failed or exc
                else:
                    stack.push(manager.__exit__)
        if failed is not None:
            raise failed
        yield values


@contextlib.contextmanager
def serve_u2netp_cpu(work: Path, model: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`craftai serve` on the CPU with u2netp pinned to `model` (a copy served on loopback from
    work/files, as its prepare service downloads it), `env` added to its environment; yields the
    address (set it up first)."""
    import hashlib
    import shutil

    (work / "files").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model, work / "files" / "u2netp.onnx")
    with files_on_loopback(work / "files") as url:
        pin = {"size": model.stat().st_size, "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
        recipes = pinned_catalogue(work / "recipes.toml", {"u2netp": {"network": {**pin, "url": f"{url}/u2netp.onnx"}}})
        with serve(work, {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": "cpu", **(env or {})}) as address:
            yield address


def jpeg(size: tuple[int, int], quality: int = 92) -> bytes:
    """The astronaut photo resized to `size` as a JPEG: the picture the benchmarks send."""
    from craftai_dev.samples import photos

    out = io.BytesIO()
    Image.open(photos()["astronaut.png"]).convert("RGB").resize(size, Image.Resampling.BICUBIC).save(
        out, format="JPEG", quality=quality
    )
    return out.getvalue()


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"p50": statistics.median(ordered), "p90": at(0.9), "p99": at(0.99), "n": float(len(ordered))}


def timed_ms(fn: Callable[[], Any], reps: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def timed_on(fn: Callable[[], Any], reps: int, warmup: int, device: Any) -> float:
    """Median ms of `fn`, the device synchronised after each call (what a caller waits for)."""
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


@dataclass(frozen=True)
class Interleaved:
    """Rates of several contenders measured in rounds (A B C, A B C, ...): each round's ratio to the
    reference is taken within the round, so a machine whose load drifts biases no contender."""

    rates: dict[str, list[float]]  # calls per second of each contender, one per round
    reference: str

    def median_rate(self, name: str) -> float:
        return statistics.median(self.rates[name])

    def ratios(self, name: str) -> list[float]:
        return [a / b for a, b in zip(self.rates[name], self.rates[self.reference], strict=True)]

    def median_ratio(self, name: str) -> float:
        return statistics.median(self.ratios(name))


def interleaved(
    contenders: dict[str, Callable[[int], Callable[[], Any]]],
    reference: str,
    *,
    rounds: int,
    calls: int,
    concurrency: int = 1,
) -> Interleaved:
    """Each round runs every contender in turn (the order rotated each round), `calls` calls spread
    over `concurrency` threads; a contender's rate in a round is its calls over the round's wall time.

    contenders: name -> (thread index -> a call). One untimed call per thread warms each first.
    """
    names = list(contenders)
    calls_of = {name: [contenders[name](i) for i in range(concurrency)] for name in names}
    for name in names:
        _spread(calls_of[name], concurrency)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = time.perf_counter()
            _spread(calls_of[name], max(calls, concurrency))
            rates[name].append(max(calls, concurrency) / (time.perf_counter() - started))
    return Interleaved(rates, reference)


def _spread(calls: list[Callable[[], Any]], count: int) -> None:
    """`count` calls over len(calls) threads (thread i makes its own call), errors re-raised."""
    shares = [count // len(calls) + (1 if i < count % len(calls) else 0) for i in range(len(calls))]

    def worker(i: int) -> None:
        for _ in range(shares[i]):
            calls[i]()

    in_threads(worker, len(calls))


def in_threads(worker: Callable[[int], Any], count: int) -> None:
    """worker(0) ... worker(count - 1) on as many threads at once; the first error is re-raised."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            worker(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def write_report(out: Path, stem: str, results: Any, text: str, *, show: bool = True) -> str:
    """`stem`.json (the raw figures) and `stem`.md (the table) under `out`, the table printed: every
    benchmark leaves both, so that a figure in docs/PERFORMANCE.md can cite its raw file."""
    (out / f"{stem}.json").write_text(json.dumps(results, indent=2, default=str))
    (out / f"{stem}.md").write_text(text if text.endswith("\n") else text + "\n")
    if show:
        print(text)
    return text
