"""Where the SAM encoder's throughput through gRPC goes (issue 19): one server, measured at
concurrency 32 by clients laid out three ways (32 threads in one process, as run.py's sam_grpc
does; 4 processes x 8 threads; 8 x 4: each process its own GIL), with the mean encoder batch and
the server's stage times under load, and, when py-spy is installed, a profile of the server during
the load (every thread, and the GIL holder alone) summarised as the frames that cost the most.

    python3 -m tools.gpu.sam_throughput --out DIR                  # the GPU machine (STEPS=sam_load)
    python3 -m tools.gpu.sam_throughput --tiny --device cpu --out DIR   # here: every part at a tiny size

Writes sam_throughput.json and sam_throughput.md (and py-spy's raw stacks) under --out.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from tools.bench import harness
from tools.gpu import pyspy

LAYOUTS = ((1, 32), (4, 8), (8, 4))  # (processes, threads each): 32 requests in flight
TINY_LAYOUTS = ((1, 2), (2, 1))


def client_process(address: str, picture: bytes, threads: int, seconds: float, queue: Any) -> None:
    """`threads` clients, each opening and closing sessions for `seconds` (at least one each);
    puts (opened, the OpenSession stage times) on the queue."""
    from craftai import AiClient

    stages: list[dict[str, float]] = []
    counts = [0] * threads
    start = threading.Barrier(threads)

    def worker(i: int) -> None:
        with AiClient(app_id=f"load-{i}", target=address) as ai:
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


def measure(address: str, picture: bytes, processes: int, threads: int, seconds: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=client_process, args=(address, picture, threads, seconds, queue))
        for _ in range(processes)
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
    lines = [
        f"SAM encoder through gRPC, {results['picture']} on {results['device']}, {results['seconds']} s a layout",
        "",
        "| clients (processes x threads) | pictures/s | mean encoder batch | server stages, median ms |",
        "|---|---|---|---|",
    ]
    for r in results["layouts"]:
        stages = ", ".join(f"{k} {v}" for k, v in r["server_stage_ms_median"].items())
        lines.append(f"| {r['layout']} | {r['pictures_per_s']:.1f} | {r.get('mean_batch', 0):.2f} | {stages} |")
    lines += pyspy.report_lines(results.get("profiles", {}))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--tiny", action="store_true")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    from craftai import AiClient
    from tools.bench import run

    size = (256, 192) if options.tiny else (2048, 1536)
    seconds = 0.0 if options.tiny else options.seconds
    picture = harness.jpeg(size)
    results: dict[str, Any] = {"picture": f"{size[0]}x{size[1]} JPEG", "seconds": seconds, "layouts": []}
    with run.sam_served(options.device) as served, AiClient(app_id="bench", target=served.address) as ai:
        ai.open_session(picture, "sam2-hiera-tiny", "torch").close()  # loads and warms the route
        results["device"] = ai.runtime().device
        for k, (processes, threads) in enumerate(TINY_LAYOUTS if options.tiny else LAYOUTS):
            before = {(r.route.engine): (r.requests, r.batches) for r in ai.runtime().loaded}
            spies = []
            if k == 1 and not options.tiny:  # the multi-process layout: the client's GIL out of the way
                spies = [pyspy.record(served.pid, seconds, options.out, gil) for gil in (False, True)]
            measured = measure(served.address, picture, processes, threads, seconds)
            after = {(r.route.engine): (r.requests, r.batches) for r in ai.runtime().loaded}
            requests = after["torch"][0] - before.get("torch", (0, 0))[0]
            batches = after["torch"][1] - before.get("torch", (0, 0))[1]
            measured["mean_batch"] = requests / batches if batches else 0.0
            results["layouts"].append(measured)
            print(measured, flush=True)
            for spy in spies:
                if spy is not None:
                    spy.wait(seconds + 60)
    results["profiles"] = pyspy.summaries(options.out)
    harness.write_report(options.out, "sam_throughput", results, report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
