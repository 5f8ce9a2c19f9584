"""The shared local server: the one `craftai serve` that a user's commands and default clients
start by themselves when no server answers at the local address, and that `craftai status` shows
and `craftai serve --stop` stops.

A command (or `AiClient()` with no address anywhere: no `target`, no CRAFTAI_ADDRESS nor a
service's address) that finds nothing listening at the local address starts `craftai serve` in
the background for this user (and this config folder) and goes on, saying so in one line. One
server per user: starting is done under a lock in the config folder, and a second command that
waited for the lock finds the server the first one started. The server writes its address to a
ready file once it serves, logs to a file beside it, and stops by itself after
CRAFTAI_SHARED_IDLE_MINUTES without a call. An address given on purpose never starts anything.

    <config>/server/lock          held while a server is being started (one at a time)
    <config>/server/state.json    the server's pid, address, log and idle minutes (written by the starter)
    <config>/server/address       its ready file (CRAFTAI_READY_FILE): written once it serves
    <config>/server/log           its log (JSON lines)

The local address is 127.0.0.1:CRAFTAI_PORT, else 127.0.0.1:50051 (where `craftai serve` listens
by default), so that a user who moves `craftai serve` to another port moves their commands too.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from craftai.errors import CraftAiError
from craftai_wire.keys import config_dir
from craftai_wire.targets import parse_target

DEFAULT_PORT = 50051
IDLE_MINUTES = 30.0  # CRAFTAI_SHARED_IDLE_MINUTES' default
START_SECONDS = 180.0  # the most a start may take (the services import their engines)
STOP_SECONDS = 60.0  # the most a stop waits (the server's grace, then its preparations)
PROBE_SECONDS = 1.0
SERVICES = ("craftai_catalogue", "craftai_prepare", "craftai_infer")
# Started through a short-lived parent, so that the server is nobody's child: it outlives the
# command, and no process that started it is left to reap it.
_LAUNCH = (
    "import subprocess, sys; print(subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, "
    "stdout=sys.stderr, stderr=sys.stderr, start_new_session=True).pid)"
)
Say = Callable[[str], None]


def local_address() -> str:
    """Where the local server listens: 127.0.0.1:CRAFTAI_PORT (when a port is set), else :50051."""
    try:
        port = int(os.environ.get("CRAFTAI_PORT", "") or DEFAULT_PORT)
    except ValueError:
        port = DEFAULT_PORT
    return f"127.0.0.1:{port if port > 0 else DEFAULT_PORT}"


def autostart_allowed() -> bool:
    """CRAFTAI_AUTOSTART is not off (the opt-out for every command and default client)."""
    return os.environ.get("CRAFTAI_AUTOSTART", "on").strip().lower() not in ("off", "0", "false", "no")


def idle_minutes() -> float:
    """CRAFTAI_SHARED_IDLE_MINUTES: how long the shared server waits without a call before it stops."""
    try:
        return max(float(os.environ.get("CRAFTAI_SHARED_IDLE_MINUTES", "") or IDLE_MINUTES), 0.0)
    except ValueError:
        return IDLE_MINUTES


def folder() -> Path:
    return config_dir() / "server"


def log_file() -> Path:
    return folder() / "log"


def _state_file() -> Path:
    return folder() / "state.json"


def _ready_file() -> Path:
    return folder() / "address"


def answering(address: str, timeout: float = PROBE_SECONDS) -> bool:
    """Whether something accepts connections at `address` (host:port): a cheap look before any
    gRPC channel, which would wait and back off."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def one_address(target: str) -> str | None:
    """The host:port a gRPC target names when it names one (None: a list, a socket, a scheme of
    its own)."""
    parsed = parse_target(target)
    if parsed.kind == "dns":
        return f"[{parsed.host}]:{parsed.port}" if ":" in parsed.host else f"{parsed.host}:{parsed.port}"
    if parsed.kind == "list" and len(parsed.listed) == 1:
        return parsed.listed[0].partition(":")[2]
    return None


def no_server(address: str) -> str:
    """What a client says when nothing answers at `address`."""
    return f"no craft-ai server at {address}: start one with `craftai serve` (or set CRAFTAI_ADDRESS)"


def installed() -> bool:
    """Whether this Python has the services (`pip install 'craftai[server]'`), so can start one."""
    return all(importlib.util.find_spec(name) is not None for name in SERVICES)


@dataclass(frozen=True)
class SharedServer:
    """The shared server as its starter recorded it, and whether it serves now."""

    pid: int
    address: str
    log: Path
    idle_minutes: float
    started_at: float


def _alive(pid: int) -> bool:
    """A running process (a zombie is not), whoever's child it is."""
    if not Path("/proc/self/stat").exists():  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _is_craftai_serve(pid: int) -> bool:
    """The process is a `craftai serve` (a recycled pid is never signalled)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return _alive(pid)
    return b"craftai.cli" in words and b"serve" in words


def shared() -> SharedServer | None:
    """The shared server of this config folder, when one is running."""
    try:
        state = json.loads(_state_file().read_text())
        found = SharedServer(
            int(state["pid"]),
            str(state["address"]),
            Path(state["log"]),
            float(state["idle_minutes"]),
            float(state["started_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(found.pid) or not _is_craftai_serve(found.pid):
        return None
    return found


@contextlib.contextmanager
def _starting(wait: float) -> Iterator[None]:
    """The lock held while a server is started (one start at a time for this config folder)."""
    here = folder()
    here.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (here / "lock").open("a") as lock:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CraftAiError(
                        grpc.StatusCode.UNAVAILABLE,
                        f"another command has been starting the shared craft-ai server for more than {wait:.0f} s "
                        f"(its log: {log_file()})",
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure(address: str, say: Say) -> bool:
    """A server answering at `address`: True when this call started one (and said so with `say`),
    False when one was there. CraftAiError when none can be started."""
    if answering(address):
        return False
    if not installed():
        raise CraftAiError(
            grpc.StatusCode.UNAVAILABLE,
            f"{no_server(address)}; this installation has the client alone and cannot start one here "
            "(pip install 'craftai[server]' for that)",
        )
    with _starting(START_SECONDS + 30):
        if answering(address):
            return False  # another command started it while this one waited
        say(_start(address).told())
    return True


def _tail(path: Path, lines: int = 3) -> str:
    try:
        kept = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return " / ".join(kept)


def _start(address: str) -> _Started:
    """`craftai serve` in the background at `address`, waited for until it serves."""
    here = folder()
    ready = _ready_file()
    ready.unlink(missing_ok=True)
    minutes = idle_minutes()
    host, _, port = address.rpartition(":")
    env = {**os.environ, "CRAFTAI_HOST": host, "CRAFTAI_PORT": port, "CRAFTAI_READY_FILE": str(ready)}
    command = [sys.executable, "-m", "craftai.cli", "serve", "--idle-minutes", f"{minutes:g}"]
    log = log_file()
    with log.open("ab") as written:
        by = " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:2]) or "a client"
        said = {"time": time.time(), "logger": "craftai.local_server", "message": f"started by {by} ({os.getpid()})"}
        written.write(json.dumps(said).encode() + b"\n")  # the log stays JSON lines
        written.flush()
        launched = subprocess.run(
            [sys.executable, "-c", _LAUNCH, *command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=written,
            text=True,
            check=False,
            cwd=here,
        )
    if launched.returncode != 0 or not launched.stdout.strip().isdigit():
        raise CraftAiError(grpc.StatusCode.UNAVAILABLE, f"{no_server(address)}; starting one failed (log: {log})")
    pid = int(launched.stdout.strip())
    state = {"pid": pid, "address": address, "log": str(log), "idle_minutes": minutes, "started_at": time.time()}
    _state_file().write_text(json.dumps(state) + "\n")
    deadline = time.monotonic() + START_SECONDS
    while not ready.exists():
        if not _alive(pid):
            raise CraftAiError(
                grpc.StatusCode.UNAVAILABLE,
                f"{no_server(address)}; the one started for you stopped at once: {_tail(log)} (its log: {log})",
            )
        if time.monotonic() > deadline:
            raise CraftAiError(
                grpc.StatusCode.UNAVAILABLE,
                f"{no_server(address)}; the one started for you (pid {pid}) did not serve within "
                f"{START_SECONDS:.0f} s (its log: {log})",
            )
        time.sleep(0.1)
    return _Started(pid, address, log, minutes)


@dataclass(frozen=True)
class _Started:
    pid: int
    address: str
    log: Path
    minutes: float

    def told(self) -> str:
        """The one line a command says when it started the server."""
        idle = f"stops after {self.minutes:g} idle minutes" if self.minutes else "runs until stopped"
        return (
            f"started a craft-ai server for you at {self.address} (pid {self.pid}; it {idle}; "
            f"log: {self.log}; stop it with: craftai serve --stop)"
        )


def stop(wait: float = STOP_SECONDS) -> SharedServer | None:
    """Stop the shared server (SIGTERM: its calls in progress finish within its grace, preparations
    run to their end) and wait for it to be gone; None when none was running."""
    found = shared()
    if found is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(found.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while _alive(found.pid):
        if time.monotonic() > deadline:
            raise CraftAiError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the shared craft-ai server (pid {found.pid}) did not stop within {wait:.0f} s (its log: {found.log})",
            )
        time.sleep(0.1)
    for gone in (_state_file(), _ready_file()):
        gone.unlink(missing_ok=True)
    return found
