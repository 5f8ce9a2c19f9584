"""Server bootstrap shared by the services: one grpc.aio server hosting one or more services.

Health (`grpc.health.v1`) reports each service NOT_SERVING until its start hook has run, then
SERVING; reflection is on; message size limits are explicit. SIGTERM or SIGINT turns health to
NOT_SERVING first, lets in-flight RPCs finish within the grace period, then stops the services.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from craftai_common.interceptors import AppIdInterceptor
from craftai_common.settings import ServerSettings
from craftai_common.store import atomic_write_text

log = logging.getLogger("craftai.server")


@dataclass
class Mount:
    """A gRPC service hosted by a server, with its lifecycle hooks.

    `start` runs once the server is bound (it receives the address, so services that call each
    other through the embedded server know where to reach it); `stop` runs after the server
    stopped taking requests.
    """

    name: str
    register: Callable[[grpc.aio.Server], None]
    start: Callable[[str], Awaitable[None]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


class Server:
    """Owns the grpc.aio server, its health servicer and the mounted services' lifecycles."""

    def __init__(self, settings: ServerSettings, mounts: Sequence[Mount]) -> None:
        self.settings = settings
        self.mounts = list(mounts)
        self.health = health.aio.HealthServicer()
        self.address = ""
        self._server = grpc.aio.server(
            interceptors=[AppIdInterceptor()], options=channel_options(settings.max_message_bytes)
        )
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
        port = server.add_insecure_port(f"{self.settings.host}:{self.settings.port}")
        if port == 0:
            raise OSError(f"cannot listen on {self.settings.host}:{self.settings.port}")
        await server.start()
        host = self.settings.host if self.settings.host not in ("0.0.0.0", "[::]", "::") else "127.0.0.1"
        self.address = f"{host}:{port}"
        for mount in self.mounts:
            if mount.start is not None:
                await mount.start(self.address)
            await self.health.set(mount.name, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info("serving %s on %s", ", ".join(m.name for m in self.mounts), self.address)
        if self.settings.ready_file is not None:
            atomic_write_text(self.settings.ready_file, self.address)
        return self.address

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self.health.enter_graceful_shutdown()
        await self._server.stop(self.settings.grace_seconds)
        for mount in reversed(self.mounts):
            if mount.stop is not None:
                try:
                    await mount.stop()
                except Exception:
                    log.exception("stopping %s failed", mount.name)
        log.info("stopped")

    async def wait(self) -> None:
        await self._stopped.wait()


async def serve(settings: ServerSettings, mounts: Sequence[Mount]) -> int:
    """Run until SIGTERM or SIGINT; exit code 0 after a graceful stop."""
    server = Server(settings, mounts)
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    try:
        await server.start()
    except BaseException:
        await server.stop()
        raise
    await stop_requested.wait()
    log.info("stopping: health NOT_SERVING, up to %.0f s for in-flight requests", settings.grace_seconds)
    await server.stop()
    return 0
