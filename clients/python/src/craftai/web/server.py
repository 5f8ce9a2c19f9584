"""Serving the gateway with uvicorn: `craftai web`, and the gateway process of `craftai serve --web`
(craftai.serve starts it beside the services; its stop or death stops this one).

uvicorn runs with the protocol of craftai.web.connections (connections and request heads bounded),
its keep-alive timeout, WebSockets (the frame stream, craftai.web.routes.frames: a message no larger
than an upload, no compression, which would cost the gateway's CPU on frames already compressed),
and a stop bounded by CRAFTAI_WEB_GRACE_SECONDS: past it the
calls still running are cancelled (craftai.web.calls), so neither a slow client nor an abandoned
call holds the stop. SIGTERM and SIGINT end it with exit code 0.

Once serving, the page's address is announced (craftai.web.link: the key never in a log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import resource
import signal
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn

from craftai.web.app import build
from craftai.web.calls import InFlight
from craftai.web.connections import HeadRules, protocol
from craftai.web.link import announce, forget
from craftai.web.settings import WebSettings
from craftai_wire.files import replace_text

log = logging.getLogger("craftai.web")
# asyncio accepts up to `backlog` waiting connections each time the listening socket is ready, and a
# connection it accepted reaches the bound of connections (which closes it) a few loop turns later,
# while the socket is ready again: up to about four bursts are open at once before the first is
# refused, and each accept the descriptor limit fails is logged. A small burst, with room kept for
# four, lets the bound refuse connections before the limit is met; the kernel's queue of connections
# waiting to be accepted is set larger again once serving (asyncio sets it to the burst).
ACCEPT_BURST = 16
LISTEN_QUEUE = 1024
# Descriptors kept beside the connections: the gateway's own (gRPC channels, its socket, logs, the
# page's files) and four accept bursts.
RESERVED_DESCRIPTORS = 64 + 4 * ACCEPT_BURST


class Server(uvicorn.Server):
    """uvicorn, leaving the process's signals to the loop's owner (uvicorn's own handling re-raises
    a caught SIGTERM once stopped, which would end the process with 143 instead of 0), and whose
    stop cancels what still runs once the grace is over."""

    def __init__(self, config: uvicorn.Config, in_flight: InFlight, grace_seconds: float) -> None:
        super().__init__(config)
        self.in_flight = in_flight
        self.grace_seconds = grace_seconds

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        over = asyncio.get_running_loop().call_later(self.grace_seconds, self.in_flight.cancel_all)
        try:
            await super().shutdown(sockets)
        finally:
            over.cancel()


def connections_within_descriptors(wanted: int) -> int:
    """The connections the gateway may hold: `wanted`, unless the process's descriptor limit (raised
    towards its hard limit if need be) leaves fewer beside the gateway's own descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + RESERVED_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    allowed = max(1, soft - RESERVED_DESCRIPTORS)
    log.warning(
        "CRAFTAI_WEB_MAX_CONNECTIONS=%d lowered to %d: the process may open %d descriptors", wanted, allowed, soft
    )
    return allowed


def configured(settings: WebSettings) -> Server:
    """The gateway's app under uvicorn, with its bounds."""
    app = build(settings)
    rules = HeadRules(
        settings.header_timeout_seconds,
        settings.max_header_bytes,
        connections_within_descriptors(settings.max_connections),
    )
    config = uvicorn.Config(
        app,
        http=protocol(rules),
        ws="websockets-sansio",
        ws_max_size=settings.max_upload_bytes,  # a larger message is refused (1009) before it is read whole
        ws_per_message_deflate=False,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_keep_alive=settings.keep_alive_seconds,
        timeout_graceful_shutdown=math.ceil(settings.grace_seconds) + 5,  # a backstop: the grace cancels first
        h11_max_incomplete_event_size=settings.max_header_bytes,
        backlog=ACCEPT_BURST,
    )
    logging.getLogger("uvicorn.error").setLevel(logging.ERROR)  # a malformed request is answered, not logged
    return Server(config, app.state.in_flight, settings.grace_seconds)


def listening(host: str, port: int) -> socket.socket:
    """The gateway's socket, bound now (port 0: any free one), so its URL is known before serving."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"craftai web cannot listen on {host}:{port}: {exc.strerror} (CRAFTAI_WEB_PORT)") from exc
    sock.listen(ACCEPT_BURST)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@contextlib.asynccontextmanager
async def serving(settings: WebSettings) -> AsyncIterator[str]:
    """The gateway serving on this loop (the URL announced, written to the ready file) until the
    block ends; it then finishes its calls in flight within its grace and stops."""
    server = configured(settings)
    sock = listening(settings.host, settings.port)
    task = asyncio.get_running_loop().create_task(server.serve([sock]))
    written: str | None = None
    try:
        while not server.started:
            if task.done():
                task.result()
                raise SystemExit("craftai web stopped before it started")
            await asyncio.sleep(0.02)
        sock.listen(LISTEN_QUEUE)
        url = url_of(sock)
        written = announce(url, settings.host)
        # Last, and whole or not at all: whoever waits for it finds the link and the announcement there.
        if settings.ready_file is not None:
            replace_text(settings.ready_file, url, mode=0o644)
        yield url
    finally:
        server.should_exit = True
        await task
        sock.close()
        if written is not None:
            forget(written)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio logs an accept that the descriptor limit failed as an error with its traceback, once
    per connection waiting: one warning a minute says it instead (the bound of connections keeps it
    from happening unless the machine's descriptors run out)."""
    last = -math.inf

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        nonlocal last
        if context.get("message") != "socket.accept() out of system resource":
            loop.default_exception_handler(context)
            return
        if loop.time() - last >= 60:
            last = loop.time()
            log.warning("out of descriptors: new connections wait (%s)", context.get("exception"))

    loop.set_exception_handler(handler)


def run(settings: WebSettings | None = None, parent: socket.socket | None = None) -> int:
    """Serve until SIGTERM or Ctrl-C. With `parent` (craftai serve --web): the URL is sent on it once
    serving, and its end (the parent stopped or died) stops the gateway too."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        quiet_accept_errors(loop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if parent is not None:
            loop.add_reader(parent.fileno(), stop.set)
        async with serving(settings or WebSettings()) as url:
            if parent is not None:
                parent.sendall(f"{url}\n".encode())
            await stop.wait()

    asyncio.run(main())
    return 0
