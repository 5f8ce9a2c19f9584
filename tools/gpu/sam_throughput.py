"""Where the SAM encoder's throughput through gRPC goes (issue 19): one server, measured at
concurrency 32 by clients laid out three ways (32 threads in one process, as run.py's sam_grpc
does; 4 processes x 8 threads; 8 x 4: each process its own GIL), with the mean encoder batch and
the server's stage times under load, and, when py-spy is installed, a profile of the server during
the load (every thread, and the GIL holder alone) summarised as the frames that cost the most.
`--replicas N` serves with `craftai serve --gpus 0 --replicas-per-gpu N`: N infer processes share
the one GPU, each with its own event loop, and the clients reach them all through one target
(sessions stay on the replica that opened them: docs/DEPLOY.md, Scaling).

    python3 -m tools.gpu.sam_throughput --out DIR                  # the GPU machine (STEPS=sam_load)
    python3 -m tools.gpu.sam_throughput --replicas 2 --out DIR     # two server processes on the GPU
    python3 -m tools.gpu.sam_throughput --tiny --device cpu --out DIR   # here: every part at a tiny size

Writes sam_throughput.json and sam_throughput.md (and py-spy's raw stacks) under --out.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from craftai_dev.servers import free_ports_in_a_row, infer_target
from tools.bench import harness
from tools.gpu import pyspy

LAYOUTS = ((1, 32), (4, 8), (8, 4))  # (processes, threads each): 32 requests in flight
TINY_LAYOUTS = ((1, 2), (2, 1))


@dataclass(frozen=True)
class Reach:
    """Where the clients call: the server's address, and the infer target over its replicas."""

    address: str
    infer: str


def client_process(reach: Reach, picture: bytes, threads: int, seconds: float, queue: Any) -> None:
    """`threads` clients, each opening and closing sessions for `seconds` (at least one each) on
    `reach`'s infer target; puts (opened, the OpenSession stage times) on the queue."""
    from craftai import AiClient

    stages: list[dict[str, float]] = []
    counts = [0] * threads
    start = threading.Barrier(threads)

    def worker(i: int) -> None:
        with AiClient(app_id=f"load-{i}", target=reach.address, infer=reach.infer) as ai:
            ai.open_session(picture, "sam2-hiera-tiny", "torch").close()  # the channel made, not counted
            start.wait()
            stop = time.monotonic() + seconds
            while True:
                session = ai.open_session(picture, "sam2-hiera-tiny", "torch")
                stages.append(dict(session.timing_ms))
                session.close()
                counts[i] += 1
                if time.monotonic() >= stop:
                    break

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    queue.put((sum(counts), stages))


def measure(reach: Reach, picture: bytes, processes: int, threads: int, seconds: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=client_process, args=(reach, picture, threads, seconds, queue)) for _ in range(processes)
    ]
    started = time.monotonic()
    for w in workers:
        w.start()
    results = [queue.get(timeout=seconds + 300) for _ in workers]
    elapsed = time.monotonic() - started
    for w in workers:
        w.join(30)
    opened = sum(r[0] for r in results)
    stages = [s for r in results for s in r[1]]
    names = sorted({k for s in stages for k in s})
    return {
        "layout": f"{processes} x {threads}",
        "opened": opened,
        # the processes' start-up is in `elapsed`: a lower bound of the rate (the loop's own time is `seconds`)
        "pictures_per_s": opened / max(seconds, 1e-9) if seconds else opened / elapsed,
        "server_stage_ms_median": {k: round(statistics.median(s[k] for s in stages if k in s), 2) for k in names},
    }


def report(results: dict[str, Any]) -> str:
    replicas = results.get("replicas", 1)
    served = "one server process" if replicas == 1 else f"{replicas} infer processes on the one device"
    lines = [
        f"SAM encoder through gRPC, {results['picture']} on {results['device']}, {served}, "
        f"{results['seconds']} s a layout",
        "",
        "| clients (processes x threads) | pictures/s | mean encoder batch | server stages, median ms |",
        "|---|---|---|---|",
    ]
    for r in results["layouts"]:
        stages = ", ".join(f"{k} {v}" for k, v in r["server_stage_ms_median"].items())
        lines.append(f"| {r['layout']} | {r['pictures_per_s']:.1f} | {r.get('mean_batch', 0):.2f} | {stages} |")
    lines += pyspy.report_lines(results.get("profiles", {}))
    return "\n".join(lines) + "\n"


def _counts(address: str, addresses: list[str]) -> tuple[int, int]:
    """The torch route's (requests, batches), added up over the infer replicas at `addresses`."""
    from craftai import AiClient

    requests = batches = 0
    for replica in addresses:
        with AiClient(app_id="bench", target=address, infer=replica) as ai:
            for r in ai.runtime().loaded:
                if r.route.engine == "torch":
                    requests, batches = requests + r.requests, batches + r.batches
    return requests, batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--replicas", type=int, default=1, help="infer processes on the device (--replicas-per-gpu)")
    parser.add_argument("--tiny", action="store_true")
    options = parser.parse_args(argv)
    if options.replicas < 1:
        parser.error("--replicas takes 1 or more")
    options.out.mkdir(parents=True, exist_ok=True)
    from craftai import AiClient
    from tools.bench import run

    size = (256, 192) if options.tiny else (2048, 1536)
    seconds = 0.0 if options.tiny else options.seconds
    picture = harness.jpeg(size)
    results: dict[str, Any] = {
        "picture": f"{size[0]}x{size[1]} JPEG",
        "seconds": seconds,
        "replicas": options.replicas,
        "layouts": [],
    }
    env: dict[str, str] = {}
    arguments: tuple[str, ...] = ()
    if options.replicas > 1:
        port = free_ports_in_a_row(options.replicas)
        env["CRAFTAI_PORT"] = str(port)
        arguments = ("--gpus", "0", "--replicas-per-gpu", str(options.replicas))
    with run.sam_served(options.device, env, arguments) as served:
        addresses = [served.address]
        if options.replicas > 1:
            host = served.address.rpartition(":")[0]
            addresses = [f"{host}:{port + rank}" for rank in range(options.replicas)]
        reach = Reach(served.address, infer_target(addresses))
        for replica in addresses:  # each replica loads and warms its route (the others start after the first)
            with AiClient(app_id="bench", target=served.address, infer=replica) as ai:
                _until_serving(ai)
                ai.open_session(picture, "sam2-hiera-tiny", "torch").close()
                results["device"] = ai.runtime().device
        for k, (processes, threads) in enumerate(TINY_LAYOUTS if options.tiny else LAYOUTS):
            before = _counts(served.address, addresses)
            spies = []
            if k == 1 and not options.tiny:  # the multi-process layout: the client's GIL out of the way
                spies = [pyspy.record(served.pid, seconds, options.out, gil) for gil in (False, True)]
            measured = measure(reach, picture, processes, threads, seconds)
            after = _counts(served.address, addresses)
            requests, batches = after[0] - before[0], after[1] - before[1]
            measured["mean_batch"] = requests / batches if batches else 0.0
            results["layouts"].append(measured)
            print(measured, flush=True)
            for spy in spies:
                if spy is not None:
                    spy.wait(seconds + 60)
    results["profiles"] = pyspy.summaries(options.out)
    name = "sam_throughput" if options.replicas == 1 else f"sam_throughput-{options.replicas}"
    harness.write_report(options.out, name, results, report(results))
    return 0


def _until_serving(ai: Any, patience: float = 300.0) -> None:
    """Waits for the replica `ai` reaches to answer (`craftai serve` starts the others after its own)."""
    from craftai import CraftAiError

    deadline = time.monotonic() + patience
    while True:
        try:
            ai.runtime()
            return
        except CraftAiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    raise SystemExit(main())
