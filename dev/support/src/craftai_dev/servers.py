"""Real service processes on loopback for the tests, and a real HTTP server for sources."""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The installed console scripts (craftai, craftai-infer, ...): beside the interpreter in a virtual
# environment; CRAFTAI_TEST_BIN where they were installed elsewhere (tools/gpu/run_tests.sh).
BIN = Path(os.environ.get("CRAFTAI_TEST_BIN") or Path(sys.executable).parent)
CONFIG_VARIABLE = "CRAFTAI_CONFIG_DIR"  # where the local app key lives (set per test run by conftest)


def ensure_local_key() -> str:
    """The local app key of this test run (made, with the keys file accepting it, if not there yet),
    as `craftai serve` makes it on first start."""
    from craftai_common.auth import ensure_local_key as ensure
    from craftai_wire.keys import default_keys_file, local_key_file, read_key_file

    if read_key_file(local_key_file()) is None or not default_keys_file().exists():
        ensure(default_keys_file())
    key = read_key_file(local_key_file())
    assert key is not None
    return key


def keys_beside_the_local_one(folder: Path, **apps: str) -> Path:
    """A keys file (CRAFTAI_KEYS_FILE) for apps with keys of their own (app id -> key), beside the
    local `*` key every other app id comes under (one tenant: docs/ARCHITECTURE.md, "Who runs next")."""
    from craftai_wire.keys import key_line

    keys = folder / "keys"
    keys.write_text("".join(key_line(app, key) for app, key in apps.items()) + key_line("*", ensure_local_key()))
    keys.chmod(0o600)
    return keys


def app_metadata(app_id: str = "tests") -> tuple[tuple[str, str], ...]:
    """gRPC metadata of a request from `app_id` with the local key, for tests that call the stubs."""
    return (("craftai-app-id", app_id), ("craftai-app-key", ensure_local_key()))


def labelled(samples: dict[str, float], name: str, **labels: str) -> list[float]:
    """The values of `samples` (Process.metrics) of the metric `name` whose labels include `labels`."""
    found = []
    for key, value in samples.items():
        base, _, rest = key.partition("{")
        have = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if base == name and all(have.get(k) == v for k, v in labels.items()):
            found.append(value)
    return found


@dataclass
class Process:
    """A service process started by a test; `stop()` sends SIGTERM and checks a clean exit."""

    name: str
    popen: subprocess.Popen[bytes]
    address: str
    log: Path
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    probe_address: str = ""  # the plain-text health port, when CRAFTAI_PROBE_PORT was given
    metrics_address: str = ""  # the Prometheus port, when CRAFTAI_METRICS_PORT was given

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """Each sample line of its Prometheus port's /metrics as `name{labels}` -> value."""
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        return {
            name: float(value)
            for line in text.splitlines()
            if line and not line.startswith("#")
            for name, _, value in [line.rpartition(" ")]
        }

    def stop(self, timeout: float = 30.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def kill(self) -> None:
        """SIGKILL: no grace, no cleanup (a crash)."""
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()

    def restart(self) -> Process:
        """Start the same command again on the same port (after a stop or a kill)."""
        port = self.address.rsplit(":", 1)[1]
        return start(self.name, self.command, {**self.env, "CRAFTAI_PORT": port}, self.log.parent)


def start(name: str, command: list[str], env: dict[str, str], workdir: Path, timeout: float = 60.0) -> Process:
    """Start a service with CRAFTAI_PORT=0 and wait until it writes its bound address."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / f"{name}.address"
    ready.unlink(missing_ok=True)
    log = workdir / f"{name}.log"
    full_env = {
        **os.environ,
        "CRAFTAI_PORT": "0",
        "CRAFTAI_HOST": "127.0.0.1",
        **env,
        "CRAFTAI_READY_FILE": str(ready),
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("ab") as out:
        popen = subprocess.Popen(command, env=full_env, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if popen.poll() is not None:
            raise RuntimeError(f"{name} exited with {popen.returncode}:\n{log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            popen.kill()
            raise TimeoutError(f"{name} did not start within {timeout} s:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    probe, metrics = env.get("CRAFTAI_PROBE_PORT", ""), env.get("CRAFTAI_METRICS_PORT", "")
    return Process(
        name,
        popen,
        ready.read_text().strip(),
        log,
        command,
        env,
        f"127.0.0.1:{probe}" if probe else "",
        f"127.0.0.1:{metrics}" if metrics else "",
    )


def embedded(store: Path, workdir: Path, env: dict[str, str] | None = None) -> Process:
    """`craftai serve`: the three services on one port."""
    return start(
        "craftai-serve", [str(BIN / "craftai"), "serve"], {"CRAFTAI_STORE": str(store), **(env or {})}, workdir
    )


@contextlib.contextmanager
def running(process: Process) -> Iterator[Process]:
    try:
        yield process
    finally:
        code = process.stop()
        assert code == 0, f"{process.name} exited with {code}:\n{process.logs()}"


@dataclass
class FileServer:
    """A real HTTP server on loopback serving a folder, with Range requests (206) like a CDN.

    Paths under /slow/ wait `slow_seconds` before answering; paths under /drip/ send 64 KiB every
    `drip_seconds` (a download that can be interrupted half way). Every request is recorded.
    """

    root: Path
    requests: dict[str, int] = field(default_factory=dict)
    ranges: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header) of each request
    slow_seconds: float = 1.0
    drip_seconds: float = 0.05
    _server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FileServer:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                owner.requests[self.path] = owner.requests.get(self.path, 0) + 1
                owner.ranges.append((self.path, self.headers.get("Range", "")))
                file = owner.root / path.lstrip("/")
                if not file.is_file():
                    self.send_error(404, "Not Found")
                    return
                data = file.read_bytes()
                start = 0
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes=") and wanted.endswith("-"):
                    start = int(wanted[6:-1])
                    if start >= len(data):
                        self.send_error(416, "Range Not Satisfiable")
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if path.startswith("/slow/"):
                    time.sleep(owner.slow_seconds)
                step = 64 * 1024 if path.startswith("/drip/") else len(data)
                try:
                    for offset in range(start, len(data), step):
                        self.wfile.write(data[offset : offset + step])
                        if path.startswith("/drip/"):
                            time.sleep(owner.drip_seconds)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports_in_a_row(count: int = 2) -> int:
    """A port P with P+1 ... P+count-1 free too (the replicas `craftai serve --gpus` starts)."""
    import socket

    for _ in range(50):
        port = free_port()
        taken = False
        for other in range(port + 1, port + count):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", other))
                except OSError:
                    taken = True
                    break
        if not taken and port + count - 1 <= 65535:
            return port
    raise RuntimeError(f"no {count} free ports in a row")


def replica_processes(pid: int) -> list[int]:
    """The infer replicas a `craftai serve --gpus` (`pid`) started: its children running craftai_infer."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (int(p) for p in (task / "children").read_text().split()):
            with contextlib.suppress(OSError):  # one that ended meanwhile
                if b"craftai_infer" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(child)
    return found


def environment_of(pid: int) -> dict[str, str]:
    """A running process's environment, as it was started with."""
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def separate(
    store: Path, workdir: Path, env: dict[str, str] | None = None, *, probe: bool = False, replicas: int = 1
) -> dict[str, Process]:
    """The three services as separate processes (the compose/Kubernetes topology), one store;
    with `probe`, infer also serves health in plain text on a port of its own. `replicas` infer
    processes (named `infer`, `infer-2`, ... as their CRAFTAI_REPLICA) share the store, and the
    catalogue reaches them as one address list, as a client would (`infer_target`)."""
    infers = ["infer", *(f"infer-{n}" for n in range(2, replicas + 1))]
    ports = {name: free_port() for name in ("catalogue", "prepare", *infers)}
    addr = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    common = {
        "CRAFTAI_STORE": str(store),
        "CRAFTAI_CATALOGUE_ADDRESS": addr["catalogue"],
        "CRAFTAI_INFER_ADDRESS": infer_target([addr[name] for name in infers]),
        **(env or {}),
    }
    started: dict[str, Process] = {}
    try:
        for name in ("catalogue", "prepare", *infers):
            own = {"CRAFTAI_PORT": str(ports[name])}
            if probe and name == "infer":
                own["CRAFTAI_PROBE_PORT"] = str(free_port())
            if name in infers and replicas > 1:
                own["CRAFTAI_REPLICA"] = name
            command = name if name not in infers else "infer"
            started[name] = start(name, [str(BIN / f"craftai-{command}")], {**common, **own}, workdir)
    except BaseException:
        for process in started.values():
            process.kill()
        raise
    return started


def infer_target(addresses: list[str]) -> str:
    """One gRPC target for the infer replicas at `addresses`: the address itself for one, else
    gRPC's address list (`ipv4:a:p,b:p`: calls spread, sessions pinned: docs/DEPLOY.md, Scaling)."""
    return addresses[0] if len(addresses) == 1 else "ipv4:" + ",".join(addresses)
