"""Two GPUs on one host: `craftai serve --gpus 0` against `--gpus 0,1` (one infer replica a GPU,
craftai.gpu_replicas), through gRPC, in one run (docs/DEPLOY.md, "Scaling"; docs/PERFORMANCE.md).

For each: SAM encodes/s (sessions opened and closed, 2048x1536 JPEG) and InSPyReNet mattes/s
(1280x960 JPEG), by `--clients` client processes of `--threads` threads each (each process its own
interpreter), the apps reaching the replicas through one target (gRPC's address list, as
CRAFTAI_INFER_ADDRESS); the ratio two/one (target >= 1.8x). Then, with two replicas: sessions
opened on both, clicked on during a matte load, and one replica killed mid-load: its sessions alone
are opened again (on the other), the others are never, and no stateless call fails.

    python3 -m tools.gpu.two_gpus --out DIR                          # the two-GPU machine
    python3 -m tools.gpu.two_gpus --tiny --device cpu --out DIR      # here: two CPU replicas standing in

The SAM 2.1 random-weight fixture (the published architecture: the same work per picture) and the
InSPyReNet random-weight checkpoint. Writes two_gpus.json and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from craftai import AiClient, CraftAiError
from craftai_dev import servers
from tools.bench import harness
from tools.bench.run import inspyrenet_checkpoint

SAM, MATTE = "sam2-hiera-tiny", "inspyrenet-swinb"
CLICK = [(0.5, 0.45, True)]  # as fractions of the picture


@contextlib.contextmanager
def served(work: Path, device: str, gpus: str) -> Iterator[Server]:
    """`craftai serve --gpus GPUS` on the store under `work` (both recipes set up): (the
    catalogue's address, the one infer target of every replica, the server's pid)."""
    files = work / "files"
    files.mkdir(parents=True, exist_ok=True)
    from craftai_dev import sam21, segment

    fixture = sam21.ensure_fixture()
    for name in segment.ROLE_FILES.values():
        if not (files / name).exists():
            try:
                os.link(fixture.folder / name, files / name)
            except OSError:  # another file system
                shutil.copyfile(fixture.folder / name, files / name)
    inspyrenet = inspyrenet_checkpoint(files)
    port = servers.free_ports_in_a_row(2)
    replicas = len(gpus.split(","))
    infer = "ipv4:" + ",".join(f"127.0.0.1:{port + rank}" for rank in range(replicas))
    with harness.files_on_loopback(files) as url:
        pins = {
            SAM: segment.fixture_pins(fixture, url),
            MATTE: {"weights": {**inspyrenet, "url": f"{url}/inspyrenet.safetensors"}},
        }
        recipes = harness.pinned_catalogue(work / "recipes.toml", pins)
        env = {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": device, "CRAFTAI_PORT": str(port)}
        with harness.serve_process(work, env, ["--gpus", gpus]) as server:
            with AiClient("bench", target=server.address, infer=infer) as ai:
                list(ai.setup("image.segment", SAM, "torch"))
                list(ai.setup("image.matte", MATTE, "torch"))
                seen: set[str] = set()
                deadline = time.monotonic() + 300
                while len(seen) < replicas:  # every replica serves (the others start after the first)
                    with contextlib.suppress(CraftAiError):
                        seen.add(ai.runtime().replica)
                    if time.monotonic() > deadline:
                        raise SystemExit(f"only {sorted(seen)} of {replicas} replicas answered")
            yield Server(server.address, infer, server.pid)


@dataclass(frozen=True)
class Server:
    """A `craftai serve --gpus` of the run: its catalogue's address, the one infer target of every
    replica, its pid (its replicas are its children)."""

    address: str
    infer: str
    pid: int


def _clients(server: Server, kind: str, picture: bytes, load: tuple[int, float], queue: Any) -> None:
    """One client process: `threads` clients, each calling `kind` (open: a session opened and
    closed; matte: a matte) for `seconds` after a warm-up call; puts (calls, errors, replicas)."""
    address, infer = server.address, server.infer
    threads, seconds = load
    done = [0] * threads
    errors: list[str] = []
    replicas: Counter[str] = Counter()
    barrier = threading.Barrier(threads)

    def worker(i: int) -> None:
        with AiClient(app_id=f"bench-{i}", target=address, infer=infer) as ai:

            def call() -> None:
                if kind == "open":
                    session = ai.open_session(picture, SAM, "torch")
                    replicas[session.replica] += 1
                    session.close()
                else:
                    ai.remove_background(picture, recipe=MATTE, engine="torch")

            call()  # routes loaded and connections made before the clock starts
            barrier.wait()
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                try:
                    call()
                    done[i] += 1
                except CraftAiError as exc:
                    errors.append(f"{exc.code.name}: {exc}")

    harness.in_threads(worker, threads)
    queue.put((sum(done), errors, dict(replicas)))


def throughput(server: Server, kind: str, picture: bytes, args: argparse.Namespace) -> dict[str, Any]:
    """Calls a second of `kind` by `args.clients` processes of `args.threads` threads."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [
        context.Process(target=_clients, args=(server, kind, picture, (args.threads, args.seconds), queue))
        for _ in range(args.clients)
    ]
    started = time.monotonic()
    for process in processes:
        process.start()
    answers = [queue.get(timeout=args.seconds + 600) for _ in processes]
    for process in processes:
        process.join(60)
    elapsed = time.monotonic() - started
    calls = sum(a[0] for a in answers)
    replicas: Counter[str] = Counter()
    for answer in answers:
        replicas.update(answer[2])
    return {
        "per_second": calls / args.seconds,
        "calls": calls,
        "errors": [e for a in answers for e in a[1]][:20],
        "sessions_by_replica": dict(replicas),
        "wall_s": round(elapsed, 1),
    }


def failover(server: Server, photo: bytes, picture: bytes, args: argparse.Namespace) -> dict[str, Any]:
    """Sessions on both replicas, clicked on during a matte load; the second replica killed
    mid-load: which sessions were opened again, and every error of the stateless calls."""
    address, infer = server.address, server.infer
    with AiClient("failover", target=address, infer=infer) as ai:
        sessions = [ai.open_session(photo, SAM, "torch") for _ in range(max(4, 2 * args.threads))]
        held = Counter(s.replica for s in sessions)
        w, h = sessions[0].width, sessions[0].height
        click = [(x * w, y * h, fg) for x, y, fg in CLICK]
        stop = threading.Event()
        errors: list[str] = []
        mattes = [0]

        def load() -> None:
            with AiClient("failover-load", target=address, infer=infer) as other:
                while not stop.is_set():
                    try:
                        other.remove_background(picture, recipe=MATTE, engine="torch")
                        mattes[0] += 1
                    except CraftAiError as exc:
                        errors.append(f"{exc.code.name}: {exc}")

        threads = [threading.Thread(target=load) for _ in range(args.threads)]
        for thread in threads:
            thread.start()
        for session in sessions:  # every session clicked once before the kill: none opened again
            assert not session.segment(points=click).reopened
        before = {s.session_id: s.replica for s in sessions}
        started = servers.replica_processes(server.pid)
        if not started:
            raise SystemExit("no replica process found to kill")
        victim = started[0]
        victim_name = servers.environment_of(victim).get("CRAFTAI_REPLICA", "")
        os.kill(victim, signal.SIGKILL)
        reopened = {s.session_id: s.segment(points=click).reopened for s in sessions}
        time.sleep(min(args.seconds, 5.0))  # the matte load goes on against the survivor
        stop.set()
        for thread in threads:
            thread.join(600)
    return {
        "sessions_by_replica_before": dict(held),
        "killed": victim_name,
        "victims_sessions_opened_again": sum(again for k, again in reopened.items() if before[k] == victim_name),
        "victims_sessions": held[victim_name],
        "others_opened_again": sum(again for k, again in reopened.items() if before[k] != victim_name),
        "stateless_errors": errors[:20],
        "mattes_during": mattes[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cuda: one replica a GPU; cpu: replicas standing in")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of load per measure")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per client process")
    parser.add_argument("--tiny", action="store_true", help="tiny pictures and counts: checks that it all runs")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        import torch

        if torch.cuda.device_count() < 2:
            raise SystemExit(f"two GPUs needed, {torch.cuda.device_count()} found (--device cpu: replicas standing in)")
    if args.tiny:
        args.seconds, args.clients, args.threads = min(args.seconds, 3.0), 1, 2
    encode_picture = harness.jpeg((256, 192) if args.tiny else (2048, 1536))
    matte_picture = harness.jpeg((64, 48) if args.tiny else (1280, 960))
    result: dict[str, Any] = {"arguments": vars(args) | {"out": str(args.out)}, "runs": {}}
    with harness.scratch("bench-two-gpus-") as work:
        for gpus in ("0", "0,1"):
            replicas = len(gpus.split(","))
            with served(work, args.device, gpus) as server:
                run = {
                    "infer": server.infer,
                    "encodes": throughput(server, "open", encode_picture, args),
                    "mattes": throughput(server, "matte", matte_picture, args),
                }
                if replicas == 2:
                    run["failover"] = failover(server, encode_picture, matte_picture, args)
                result["runs"][f"{replicas} replica(s)"] = run
    one, two = result["runs"]["1 replica(s)"], result["runs"]["2 replica(s)"]
    result["ratio"] = {k: two[k]["per_second"] / max(one[k]["per_second"], 1e-9) for k in ("encodes", "mattes")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "two_gpus.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'':10} {'1 replica':>12} {'2 replicas':>12} {'ratio':>7}   (target >= 1.8x)")
    for kind in ("encodes", "mattes"):
        rates = f"{one[kind]['per_second']:12.1f} {two[kind]['per_second']:12.1f}"
        print(f"{kind + '/s':10} {rates} {result['ratio'][kind]:6.2f}x")
    f = two["failover"]
    print(
        f"failover ({f['killed']} killed): sessions {f['sessions_by_replica_before']}, its sessions opened again "
        f"{f['victims_sessions_opened_again']} of {f['victims_sessions']}, the others' {f['others_opened_again']}, "
        f"stateless errors {len(f['stateless_errors'])}"
    )
    print(f"raw: {args.out / 'two_gpus.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
