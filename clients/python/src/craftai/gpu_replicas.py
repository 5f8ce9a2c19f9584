"""`craftai serve --gpus`: one infer replica per GPU on one host (or several: `--replicas-per-gpu`),
behind one gRPC target.

A process drives one GPU best (one CUDA context, one event loop, its own batches), so a host with
several GPUs runs one infer replica per GPU, as compose.gpu.yaml and the Kubernetes GPU overlay do:
each replica sees only its GPU (CUDA_VISIBLE_DEVICES), has a name of its own (`<name>-gpu<id>`:
sessions name it) and its own port. `craftai serve` keeps the catalogue, prepare and the first
GPU's replica in its own process, on its port P, and starts the others as processes of their own
(`python -m craftai_infer`, by way of `_REPLICA`) on P+1, P+2, ..., sharing its store, its keys
and its certificate, and reaching its catalogue. Clients reach every replica through one target, gRPC's address list
(`ipv4:127.0.0.1:P,127.0.0.1:P+1`, as CRAFTAI_INFER_ADDRESS): stateless calls spread over them and
each session stays on the replica that opened it (craftai.replicas), as with a DNS name that
resolves to every replica.

The replicas are owned here: started once the services listen, each waited for until it serves
(its ready file), stopped first on SIGTERM (each within its grace, then killed), stopped too when
this process dies however it dies (Linux: the parent-death signal), and a replica that dies is
logged, not restarted (its sessions are opened again on the others by the SDK). With
CRAFTAI_DEVICE=cpu the same plan runs on the CPU: `--gpus 0,1` then stands for two GPUs (tests).

`--replicas-per-gpu N` runs N replicas on each GPU: processes of their own that share the GPU (its
memory and its time), each with its own event loop, interpreter lock and queues, so that one
process's request handling is not the limit and one app's calls are not held by the interpreter
another app's work keeps busy (docs/DEPLOY.md, Scaling; the measure: docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from craftai.child_processes import stop_within

log = logging.getLogger("craftai.serve")
START_SECONDS = 180.0  # the most a replica may take to serve (its engines import)
_GPU_ID = re.compile(r"^[A-Za-z0-9-]+$")  # an index or a GPU's UUID (GPU-8c1a...), as CUDA_VISIBLE_DEVICES takes it
# Ports a replica takes its own of: P + its rank where set (0: a free one, as given)
_PORTS = ("CRAFTAI_PORT", "CRAFTAI_PROBE_PORT", "CRAFTAI_METRICS_PORT")
# A replica: `python -m craftai_infer` that first asks (Linux, prctl's PR_SET_PDEATHSIG) for SIGTERM
# when this process ends however it ends (killed, crashed), so that none outlives it holding its GPU
# and its port; asked in the replica itself, after exec (a pre-exec hook in this process of many
# threads can deadlock the fork), then checked: a parent gone already ends it at once.
_REPLICA = (
    "import ctypes, os, runpy, signal, sys\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('craftai serve ended before this replica started')\n"
    "runpy.run_module('craftai_infer', run_name='__main__')\n"
)


class GpusError(ValueError):
    """`--gpus` names no GPU list this host can run."""


def gpus(spec: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs `--gpus` names: `all`, every visible one (CUDA_VISIBLE_DEVICES's list where set,
    else the count torch finds; none without a GPU or torch), or a comma list of indices or UUIDs."""
    env = os.environ if env is None else env
    spec = spec.strip()
    if spec == "all":
        visible = env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
        return [str(k) for k in range(_device_count())]
    named = [g.strip() for g in spec.split(",")]
    bad = [g for g in named if not _GPU_ID.match(g)]
    if not named or bad:
        raise GpusError(f"--gpus takes 'all' or GPU indices or UUIDs separated by commas (e.g. 0,1), not {spec!r}")
    twice = sorted({g for g in named if named.count(g) > 1})
    if twice:
        raise GpusError(
            f"--gpus names GPU {', '.join(twice)} twice: name each GPU once "
            "(several replicas on each: --replicas-per-gpu N)"
        )
    return named


def _device_count() -> int:
    """The GPUs torch finds, asked in a process of its own: CUDA reads CUDA_VISIBLE_DEVICES once per
    process, and this one sets it for its own replica afterwards."""
    ask = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        found = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120, check=True)
        return int(found.stdout.strip() or 0)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0  # no torch (or no driver): no GPU


@dataclass(frozen=True)
class Replica:
    """One infer replica of the plan: its GPU, its name, its rank (0: this process's)."""

    gpu: str
    name: str
    rank: int


def plan(gpu_ids: list[str], base_name: str = "", per_gpu: int = 1) -> list[Replica]:
    """`per_gpu` replicas a GPU, named `<base>-gpu<id>`, then `<base>-gpu<id>-2`, ... (base:
    CRAFTAI_REPLICA, else the host name); a GPU's replicas are ranked one after the other."""
    if per_gpu < 1:
        raise GpusError(f"--replicas-per-gpu takes 1 or more, not {per_gpu}")
    base = base_name or os.environ.get("CRAFTAI_REPLICA") or socket.gethostname().split(".")[0] or "infer"
    names = [(gpu, f"{base}-gpu{gpu}" + (f"-{k + 1}" if k else "")) for gpu in gpu_ids for k in range(per_gpu)]
    return [Replica(gpu, name, rank) for rank, (gpu, name) in enumerate(names)]


def memory_share(configured: int, replicas: int, host: int) -> int:
    """Each replica's CRAFTAI_MEMORY_LIMIT_BYTES: the one set (each replica's own), else an equal
    share of `host`, what this host lets its processes use (the cgroup's limit, else the machine's
    memory), since every replica sizes its budgets from that figure and they all draw on it."""
    return configured or host // replicas


def ports_of(rank: int, env: Mapping[str, str]) -> dict[str, str]:
    """A replica's ports: each port set for this process, plus the replica's rank (0 stays 0)."""
    own = {}
    for variable in _PORTS:
        value = env.get(variable, "")
        if value.strip():
            port = int(value)
            own[variable] = str(port + rank if port else 0)
    return own


def target(host: str, port: int, replicas: list[Replica]) -> str:
    """The one gRPC target of every replica (this process's port P, the others P + rank)."""
    address = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return "ipv4:" + ",".join(f"{address}:{port + r.rank}" for r in replicas)


@contextlib.asynccontextmanager
async def running(
    replicas: list[Replica], address: str, env: Mapping[str, str], grace_seconds: float
) -> AsyncIterator[list[str]]:
    """The replicas but the first (this process's) serving for the block, beside the services at
    `address` (their catalogue): their addresses, in rank order. `env`: the environment they
    share (this process's, with its port, store and replicas target set); each is stopped within
    `grace_seconds` (this process's)."""
    children: list[tuple[Replica, asyncio.subprocess.Process]] = []
    # each replica says its address in a file of the store's own (a process killed before its end
    # leaves nothing elsewhere: the next start overwrites it); a temporary folder without a store
    store = env.get("CRAFTAI_STORE", "")
    with contextlib.ExitStack() as owned:
        folder = Path(store) / "tmp" / "replicas" if store else Path(owned.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        try:
            addresses = [address]
            for replica in replicas[1:]:
                ready = folder / f"{replica.name}.address"
                ready.unlink(missing_ok=True)  # a file of an earlier start: never read as this one's
                own = {
                    **env,
                    **ports_of(replica.rank, env),
                    "CUDA_VISIBLE_DEVICES": replica.gpu,
                    "CRAFTAI_REPLICA": replica.name,
                    "CRAFTAI_CATALOGUE_ADDRESS": address,
                    "CRAFTAI_READY_FILE": str(ready),
                }
                child = await asyncio.create_subprocess_exec(sys.executable, "-c", _REPLICA, str(os.getpid()), env=own)
                children.append((replica, child))
                addresses.append(await _ready(replica, child, ready))
                log.info("infer replica %s on GPU %s serves at %s", replica.name, replica.gpu, addresses[-1])
            watchers = [asyncio.create_task(_watch(replica, child)) for replica, child in children]
            try:
                yield addresses
            finally:
                for watcher in watchers:
                    watcher.cancel()
        finally:
            stopping = (stop_within(child, grace_seconds, f"the infer replica {r.name}") for r, child in children)
            await asyncio.gather(*stopping)


async def _ready(replica: Replica, child: asyncio.subprocess.Process, ready: Path) -> str:
    """The replica's address once it serves; its exit or START_SECONDS first is an error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_SECONDS
    while not await asyncio.to_thread(ready.exists):
        if child.returncode is not None:
            raise SystemExit(f"the infer replica {replica.name} (GPU {replica.gpu}) exited with {child.returncode}")
        if loop.time() > deadline:
            raise SystemExit(f"the infer replica {replica.name} did not serve within {START_SECONDS:.0f} s")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), 0.1)
    said = (await asyncio.to_thread(ready.read_text)).strip()
    await asyncio.to_thread(ready.unlink, True)
    return said


async def _watch(replica: Replica, child: asyncio.subprocess.Process) -> None:
    code = await child.wait()
    log.error(
        "the infer replica %s (GPU %s) exited with code %d; the others go on (its sessions are opened again there)",
        replica.name,
        replica.gpu,
        code,
    )
