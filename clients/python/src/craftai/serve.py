"""`craftai serve`: the three services on one port with one store folder (the embedded default);
with `--web`, the web gateway in a process of its own beside them.

The gateway is a separate process so that nothing it meets (connections by the thousand, slow or
huge requests, a crash) can take the descriptors, memory or event loop the gRPC services need. This
process starts it once the services listen (`python -m craftai.serve --gateway FD ...`: its
settings in CRAFTAI_WEB_*, one end of a socket pair on which it says its URL once serving, and whose
closing stops it should this process die), stops it first on SIGTERM (it finishes or cancels its
calls within CRAFTAI_WEB_GRACE_SECONDS while the services still answer), and goes on serving gRPC if
it dies (logged).

The service packages are optional dependencies of the SDK (`pip install craftai[server]`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from craftai.child_processes import stop_within

if TYPE_CHECKING:
    from craftai.web.settings import WebSettings

log = logging.getLogger("craftai.serve")
GATEWAY_START_SECONDS = 60.0


def run(
    host: str | None,
    port: int | None,
    store: Path | None,
    *,
    web: WebSettings | None = None,
    idle_minutes: float = 0.0,
    gpus: str | None = None,
    per_gpu: int = 1,
) -> int:
    """Serve until SIGTERM or Ctrl-C (or `idle_minutes` without a call, the shared local server's
    way to end); with `web`, the web gateway too (its own port and process), calling these
    services at the address they listen on; with `gpus` ('all' or a list), one infer replica per
    GPU, `per_gpu` on each (craftai.gpu_replicas). Logs are JSON lines, or text for people on a terminal (unless
    CRAFTAI_LOG_FORMAT says which)."""
    from craftai import gpu_replicas

    try:
        if per_gpu != 1 and gpus is None:
            raise gpu_replicas.GpusError("--replicas-per-gpu needs --gpus (which GPUs: all, or a list)")
        gpu_ids = gpu_replicas.gpus(gpus) if gpus is not None else None
        replicas = gpu_replicas.plan(gpu_ids, per_gpu=per_gpu) if gpu_ids else []
    except gpu_replicas.GpusError as exc:
        raise SystemExit(f"craftai serve: {exc}") from exc
    replicas = replicas if len(replicas) > 1 else []  # one replica is this process alone: none beside it
    if gpu_ids:  # this process's GPU, set before anything reads it
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_ids[0]
    try:
        from craftai_catalogue import service as catalogue
        from craftai_catalogue.settings import CatalogueSettings
        from craftai_common.limits import memory_limit
        from craftai_common.server import configure_logging, exit_process, serve
        from craftai_infer import service as infer
        from craftai_infer.settings import InferSettings
        from craftai_prepare import service as prepare
        from craftai_prepare.settings import PrepareSettings
    except ImportError as exc:
        raise SystemExit(f"craftai serve needs the service packages (pip install 'craftai[server]'): {exc}") from exc

    overrides = {k: v for k, v in (("host", host), ("port", port), ("store", store)) if v is not None}
    terminal = {"log_format": "text"} if "CRAFTAI_LOG_FORMAT" not in os.environ and sys.stderr.isatty() else {}
    infer_settings = InferSettings(**overrides, **terminal)  # type: ignore[arg-type]
    if replicas:
        fixed = infer_settings.port != 0  # else each replica takes a free port: no target known at start
        everyone = gpu_replicas.target(infer_settings.host, infer_settings.port, replicas) if fixed else ""
        share = gpu_replicas.memory_share(infer_settings.memory_limit_bytes, len(replicas), memory_limit()[0])
        update = {"replica": replicas[0].name, "replicas_target": everyone, "memory_limit_bytes": share}
        infer_settings = infer_settings.model_copy(update=update)
    configure_logging(infer_settings, "serve")
    if gpu_ids is not None and not gpu_ids:
        log.info("--gpus %s: no GPU found; one infer replica, on the CPU", gpus)
    mounts = [
        catalogue.build(CatalogueSettings(**overrides), embedded=True),  # type: ignore[arg-type]
        prepare.build(PrepareSettings(**overrides), embedded=True),  # type: ignore[arg-type]
        infer.build(infer_settings, embedded=True),
    ]
    logging_of = (infer_settings.log_level, infer_settings.log_format)
    shared = {  # what the other replicas share with this process (craftai.gpu_replicas)
        **os.environ,
        "CRAFTAI_HOST": infer_settings.host,
        "CRAFTAI_PORT": str(infer_settings.port),
        "CRAFTAI_STORE": str(infer_settings.store),
        "CRAFTAI_REPLICAS_TARGET": infer_settings.replicas_target,
        "CRAFTAI_MEMORY_LIMIT_BYTES": str(infer_settings.memory_limit_bytes),
        "CRAFTAI_LOG_FORMAT": infer_settings.log_format,
    }

    @contextlib.asynccontextmanager
    async def beside(address: str) -> AsyncIterator[str]:
        async with contextlib.AsyncExitStack() as stack:
            addresses = [address]
            if replicas:
                started = gpu_replicas.running(replicas, address, shared, infer_settings.grace_seconds)
                addresses = await stack.enter_async_context(started)
                log.info(
                    "%d infer replicas (%s); clients reach them all at ipv4:%s (CRAFTAI_INFER_ADDRESS)",
                    len(replicas),
                    ", ".join(f"{r.name}: GPU {r.gpu}" for r in replicas),
                    ",".join(addresses),
                )
                if per_gpu > 1:  # where one process's Python would hold clicks behind bulk callers
                    log.info(
                        "for clicks that stay interactive beside bulk work, point the interactive apps at %s "
                        "alone and the bulk apps at ipv4:%s (docs/DEPLOY.md, Interactive and bulk apps on one GPU)",
                        addresses[0],
                        ",".join(addresses[1:]),
                    )
            if web is not None:
                update = {"target": web.target or address}
                if len(addresses) > 1 and web.infer is None:  # its calls spread over every replica, as an app's do
                    update["infer"] = "ipv4:" + ",".join(addresses)
                await stack.enter_async_context(gateway_process(web.model_copy(update=update), *logging_of))
            yield address

    code = asyncio.run(serve(infer_settings, mounts, beside, idle_seconds=idle_minutes * 60))
    exit_process(code)  # nothing of the models outlives the stop


def environment(web: WebSettings) -> dict[str, str]:
    """This process's environment with the gateway's settings as CRAFTAI_WEB_* (unset: removed)."""
    env = dict(os.environ)
    prefix = str(web.model_config.get("env_prefix", ""))
    for name, value in web.model_dump().items():
        variable = f"{prefix}{name.upper()}"
        if value is None:
            env.pop(variable, None)
        else:
            env[variable] = str(value)
    return env


@contextlib.asynccontextmanager
async def gateway_process(web: WebSettings, log_level: str, log_format: str) -> AsyncIterator[str]:
    """The gateway's process, serving until the block ends (then stopped within its grace)."""
    ours, theirs = socket.socketpair()
    command = [sys.executable, "-m", "craftai.serve", "--gateway", str(theirs.fileno()), log_level, log_format]
    child = await asyncio.create_subprocess_exec(*command, pass_fds=(theirs.fileno(),), env=environment(web))
    theirs.close()
    reader, writer = await asyncio.open_connection(sock=ours)
    watcher: asyncio.Task[None] | None = None
    try:
        try:
            line = await asyncio.wait_for(reader.readline(), GATEWAY_START_SECONDS)
        except TimeoutError:
            line = b""
        if not line:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            raise SystemExit(f"craftai web stopped before it started (exit code {await child.wait()})")
        watcher = asyncio.create_task(_watch(child))
        yield line.decode().strip()
    finally:
        if watcher is not None:
            watcher.cancel()
        await stop_within(child, web.grace_seconds, "the web gateway")
        writer.close()


async def _watch(child: asyncio.subprocess.Process) -> None:
    code = await child.wait()
    if code != 0:
        log.error("the web gateway exited with code %d; the gRPC services go on without it", code)


def gateway(arguments: list[str]) -> int:
    """The gateway process (`--gateway FD LEVEL FORMAT`): logging as the services log, its settings
    from the environment, `FD` its end of the socket pair."""
    from craftai.web import server
    from craftai.web.settings import WebSettings
    from craftai_common import observability

    descriptor, level, log_format = arguments
    observability.configure_logging(level, log_format, "web")
    return server.run(WebSettings(), parent=socket.socket(fileno=int(descriptor)))


if __name__ == "__main__":
    if sys.argv[1:2] != ["--gateway"]:
        raise SystemExit("usage: python -m craftai.serve --gateway FD LEVEL FORMAT (craftai serve --web starts it)")
    raise SystemExit(gateway(sys.argv[2:]))
