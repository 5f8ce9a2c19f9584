"""`craftai serve` (the three services in one process, and with --web the gateway beside them; with
--stop, the shared server a command started stopped) and `craftai web` (the gateway in front of
services elsewhere)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from craftai.local_server import stop

if TYPE_CHECKING:
    from craftai.web.settings import WebSettings


def web_settings(options: argparse.Namespace) -> WebSettings:
    try:
        from craftai.web.settings import WebSettings
    except ImportError as exc:
        raise SystemExit(f"craftai: the web gateway needs its extra (pip install 'craftai[web]'): {exc}") from exc
    given = {"host": options.web_host, "port": options.web_port, "target": getattr(options, "address", None)}
    return WebSettings(**{k: v for k, v in given.items() if v is not None})


def cmd_serve(options: argparse.Namespace) -> int:
    if options.stop:
        return stop_shared()
    from craftai.serve import run

    web = web_settings(options) if options.web else None
    if web is not None:
        web = web.model_copy(update={"target": None})  # the services of this process
    return run(
        options.host,
        options.port,
        options.store,
        web=web,
        idle_minutes=options.idle_minutes or 0.0,
        gpus=options.gpus,
        per_gpu=options.replicas_per_gpu,
    )


def stop_shared() -> int:
    """`craftai serve --stop`: the shared server a command started, stopped and waited for."""
    stopped = stop()
    if stopped is None:
        print("no shared craft-ai server is running (a command starts one when none answers)")
    else:
        print(f"stopped the shared craft-ai server at {stopped.address} (pid {stopped.pid})")
    return 0


def cmd_web(options: argparse.Namespace) -> int:
    from craftai.web import server

    return server.run(web_settings(options))
