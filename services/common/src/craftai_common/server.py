"""Server bootstrap shared by the services: one grpc.aio server hosting one or more services.

Health (`grpc.health.v1`) reports each service NOT_SERVING until its start hook has run, then
SERVING; reflection is on; message size limits are explicit; keepalive and connection renewal as
craftai_wire.channels.server_options says. Every RPC goes through the gateway (interceptors.py: app
keys, limits, time limits, request ids, metrics, one log line per call; health and reflection need
no key but their streams are bounded). TLS or mutual TLS when configured (peers.py), else, on a
loopback address, TLS with the local server's own certificate (local_tls.py); an optional
plain-text port serving only health for probes, and an optional Prometheus port.

SIGTERM or SIGINT: health turns NOT_SERVING first (still answered on every port), new calls from
apps are refused (UNAVAILABLE / SHUTTING_DOWN), the services are told to stop waiting for what
may never come (a setup waiting for another process's lock answers "retry"), the calls in progress
get up to the grace period to finish, then the server stops, then the services (running
preparations are waited for).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from craftai_common import observability
from craftai_common.auth import KeyRing, KeysFileError
from craftai_common.interceptors import Gateway, Limits
from craftai_common.peers import server_credentials
from craftai_common.settings import ServerSettings
from craftai_wire.channels import server_options
from craftai_wire.files import replace_text

log = logging.getLogger("craftai.server")


class StartRefusedError(Exception):
    """A server that must not start (its port taken, its name another's): said in plain words, and
    the process exits with code 2 rather than a traceback."""


@dataclass
class Mount:
    """A gRPC service hosted by a server, with its lifecycle hooks.

    `start` runs once the server is bound (it receives the address, so services that call each
    other through the embedded server know where to reach it); `drain` as soon as a stop is asked
    (before the calls in progress are waited for: stop waiting for anything that may not come);
    `stop` after the server stopped taking requests. `long_calls` names the methods allowed longer
    than CRAFTAI_MAX_CALL_SECONDS (full method name -> seconds).
    """

    name: str
    register: Callable[[grpc.aio.Server], None]
    start: Callable[[str], Awaitable[None]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None
    drain: Callable[[], None] | None = None
    long_calls: Mapping[str, float] = field(default_factory=dict)


def configure_logging(settings: ServerSettings, service: str) -> None:
    """JSON lines (or text) on stderr, at the configured level (observability.py)."""
    observability.configure_logging(settings.log_level, settings.log_format, service)


def _shown_host(host: str) -> str:
    return host if host not in ("0.0.0.0", "[::]", "::") else "127.0.0.1"


class Server:
    """Owns the grpc.aio server(s), the health servicer, the gateway, the metrics endpoint and the
    mounted services' lifecycles."""

    def __init__(self, settings: ServerSettings, mounts: Sequence[Mount]) -> None:
        self.settings = settings
        self.mounts = list(mounts)
        self.health = health.aio.HealthServicer()
        self.address = ""
        self.probe_address = ""
        self.metrics_address = ""
        self.keys = KeyRing.configure(settings.keys_file, settings.keys, settings.auth == "on")
        self.limits = Limits(
            per_app=settings.max_requests_per_app,
            wildcard=settings.max_wildcard_requests,
            per_service=settings.max_requests,
            internal=settings.max_internal_requests,
            open_streams=settings.max_open_streams,
            max_call_seconds=settings.max_call_seconds,
            long_calls={method: seconds for mount in self.mounts for method, seconds in mount.long_calls.items()},
            stalled_write_seconds=settings.stalled_write_seconds,
        )
        self.gateway = Gateway(self.keys, self.limits)
        self._options = server_options(
            settings.max_message_bytes,
            max_connection_age_s=settings.max_connection_age_seconds,
            grace_s=settings.max_call_seconds,  # a call on a renewed connection may still run its time
        )
        self._server = grpc.aio.server(interceptors=self.gateway.interceptors, options=self._options)
        self._probe: grpc.aio.Server | None = None
        self._metrics: observability.MetricsServer | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> str:
        server = self._server
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for mount in self.mounts:
            mount.register(server)
            await self.health.set(mount.name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        names = [m.name for m in self.mounts] + [health.SERVICE_NAME, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(names, server)
        where = f"{self.settings.host}:{self.settings.port}"
        credentials = server_credentials(self.settings)
        try:
            port = (
                server.add_insecure_port(where) if credentials is None else server.add_secure_port(where, credentials)
            )
        except RuntimeError:
            port = 0
        if port == 0:
            raise StartRefusedError(
                f"cannot listen on {where}: the port is in use (another craftai serve, or another program?) or "
                "the address is not this machine's; stop that server, or choose another port (CRAFTAI_PORT)"
            )
        await server.start()
        self.address = f"{_shown_host(self.settings.host)}:{port}"
        if self.settings.probe_port is not None:
            await self._start_probe(self.settings.probe_port)
        if self.settings.metrics_port is not None:
            self._metrics = observability.MetricsServer(
                self.settings.metrics_host or self.settings.host, self.settings.metrics_port
            )
            self.metrics_address = self._metrics.address
            log.info(
                "metrics on http://%s/metrics", self.metrics_address, extra={"metrics_address": self.metrics_address}
            )
        for mount in self.mounts:
            if mount.start is not None:
                await mount.start(self.address)
            await self.health.set(mount.name, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        tls = "plain text" if credentials is None else "TLS"
        if self.settings.tls_client_ca is not None:
            tls = "mutual TLS"
        elif credentials is not None and self.settings.tls_cert is None:
            tls = "TLS with the local certificate"
        auth = f"app keys from {self.keys.file or 'the environment'}" if self.keys.enabled else "NO app keys (off)"
        log.info("serving %s on %s (%s, %s)", ", ".join(m.name for m in self.mounts), self.address, tls, auth)
        if self.settings.ready_file is not None:
            replace_text(self.settings.ready_file, self.address)
        return self.address

    async def _start_probe(self, port: int) -> None:
        """A plain-text server with only grpc.health.v1 (the same statuses): for Kubernetes probes,
        which cannot speak TLS. It serves nothing else."""
        probe = grpc.aio.server(interceptors=self.gateway.interceptors, options=self._options)  # Watch bounded too
        health_pb2_grpc.add_HealthServicer_to_server(self.health, probe)
        bound = probe.add_insecure_port(f"{self.settings.host}:{port}")
        if bound == 0:
            raise OSError(f"cannot listen on {self.settings.host}:{port} (CRAFTAI_PROBE_PORT)")
        await probe.start()
        self._probe = probe
        self.probe_address = f"{_shown_host(self.settings.host)}:{bound}"
        log.info("health probes (plain text) on %s", self.probe_address)

    async def stop(self) -> None:
        """Health NOT_SERVING, refuse new calls, let those in progress finish (grace), then stop."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.settings.grace_seconds
        await self.health.enter_graceful_shutdown()
        self.gateway.start_draining()
        for mount in self.mounts:
            if mount.drain is not None:
                mount.drain()
        started = asyncio.get_running_loop().time()
        if not await self.gateway.wait_idle(grace):
            log.warning("%d call(s) still in progress after %.0f s: cancelled", self.gateway.in_flight, grace)
        left = max(0.0, grace - (asyncio.get_running_loop().time() - started))
        await self._server.stop(min(left, 1.0))
        for mount in reversed(self.mounts):
            if mount.stop is not None:
                try:
                    await mount.stop()
                except Exception:
                    log.exception("stopping %s failed", mount.name)
        if self._probe is not None:
            await self._probe.stop(0)
        await self.gateway.close()
        if self._metrics is not None:
            self._metrics.close()
        log.info("stopped")

    async def wait(self) -> None:
        await self._stopped.wait()


def exit_process(code: int) -> NoReturn:
    """End a process that served models, once `serve` has returned: the logs flushed, then no
    interpreter teardown. Model calls a stop left running on worker threads past the grace (their
    callers are gone) would otherwise be waited for, or have their engine torn down under them
    (onnxruntime aborts the process); everything that must finish has finished by then (the calls
    in their grace, preparations, the services' stop hooks)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


async def _stop_when_idle(server: Server, seconds: float, stop: asyncio.Event) -> None:
    """Ask for the stop once no call has been in progress for `seconds` (calls between the services
    count; health probes do not)."""
    while not stop.is_set():
        idle = server.gateway.idle_seconds()
        if idle >= seconds:
            log.info("no call for %g minute(s): stopping", seconds / 60)
            stop.set()
            return
        await asyncio.sleep(min(max(seconds - idle, 0.05), 5.0))


async def serve(
    settings: ServerSettings,
    mounts: Sequence[Mount],
    beside: Callable[[str], contextlib.AbstractAsyncContextManager[object]] | None = None,
    idle_seconds: float = 0.0,
) -> int:
    """Run until SIGTERM or SIGINT; exit code 0 after a graceful stop (2 for a bad keys setting).

    `beside(address)`: something served with the services on this loop (`craftai serve --web`: the
    web gateway), entered once they listen at `address` and left before they stop. `idle_seconds`
    (the shared local server's): stop as on SIGTERM once no call has been in progress that long."""
    try:
        server = Server(settings, mounts)
    except KeysFileError as exc:
        log.error("cannot start: %s", exc)
        return 2
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    try:
        await server.start()
    except StartRefusedError as exc:
        await server.stop()
        log.error("cannot start: %s", exc)
        return 2
    except BaseException:
        await server.stop()
        raise
    idle = asyncio.create_task(_stop_when_idle(server, idle_seconds, stop_requested)) if idle_seconds > 0 else None
    try:
        async with beside(server.address) if beside is not None else contextlib.nullcontext():
            await stop_requested.wait()
    except BaseException:  # what ran beside failed: stop the services too, and say why
        await server.stop()
        raise
    finally:
        if idle is not None:
            idle.cancel()
    log.info("stopping: health NOT_SERVING, up to %.0f s for in-flight requests", settings.grace_seconds)
    await server.stop()
    return 0
