"""Serving the gateway with uvicorn: alone (`craftai web`) or on the event loop of the services
(`craftai serve --web`, whose signals stop both: the gateway first, so that its requests in flight
finish while the services still answer). SIGTERM and SIGINT end either with exit code 0."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import uvicorn

from craftai.web.app import build
from craftai.web.settings import WebSettings
from craftai_wire.keys import is_loopback, local_key_file, read_key_file


class Server(uvicorn.Server):
    """uvicorn, leaving the process's signals to the loop's owner (uvicorn's own handling re-raises
    a caught SIGTERM once stopped, which would end the process with 143 instead of 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listening(host: str, port: int) -> socket.socket:
    """The gateway's socket, bound now (port 0: any free one), so its URL is known before serving."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"craftai web cannot listen on {host}:{port}: {exc.strerror} (CRAFTAI_WEB_PORT)") from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def page_link(url: str, host: str) -> str:
    """The page's address to print. On a loopback gateway with a local key the key rides in the
    fragment: browsers never send a fragment to any server; the page reads it, keeps it in the
    browser and removes it from the address bar. So the user who started the server (who can read
    the key file) opens the page and is served, and nobody else on the machine is."""
    key = read_key_file(local_key_file()) if is_loopback(host) else None
    return f"{url}/#key={quote(key)}" if key else f"{url}/"


@contextlib.asynccontextmanager
async def serving(settings: WebSettings) -> AsyncIterator[str]:
    """The gateway serving on this loop (the URL announced: printed, written to the ready file)
    until the block ends; it then finishes its requests in flight and stops."""
    server = Server(uvicorn.Config(build(settings), log_config=None, access_log=False))
    sock = listening(settings.host, settings.port)
    task = asyncio.get_running_loop().create_task(server.serve([sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise SystemExit("craftai web stopped before it started")
            await asyncio.sleep(0.02)
        url = url_of(sock)
        if settings.ready_file is not None:
            settings.ready_file.write_text(url)
        print(f"craftai web: the page and the HTTP API on {page_link(url, settings.host)}", flush=True)
        yield url
    finally:
        server.should_exit = True
        await task
        sock.close()


def run(settings: WebSettings | None = None) -> int:
    """`craftai web`: serve until SIGTERM or Ctrl-C."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with serving(settings or WebSettings()):
            await stop.wait()

    asyncio.run(main())
    return 0
