"""The web gateway on loopback for the tests: `craftai web` as a real process in front of real
services, and Debian's chromium driven by Playwright (launched with that executable: Playwright's
own browser download is never used; the flags keep it off the network)."""

from __future__ import annotations

import os
import shutil
import socket
import tomllib
from pathlib import Path

from craftai_dev import catalogues, servers
from craftai_dev.browser import chromium, launch

__all__ = ["both_features_store", "chromium", "gateway", "http_answer", "launch"]


def http_answer(sock: socket.socket) -> bytes:
    """One HTTP/1.1 answer read from a raw socket: its head and its body (Content-Length bytes),
    however many reads they take (the server may send them apart: one read got the head alone on a
    loaded machine). Cut short only where the server closes the connection first."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        more = sock.recv(65536)
        if not more:
            return answer
        answer += more
    head, _, body = answer.partition(b"\r\n\r\n")
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    while lengths and len(body) < int(lengths[0]):
        more = sock.recv(65536)
        if not more:
            break
        body += more
    return head + b"\r\n\r\n" + body


def gateway(
    services: str, workdir: Path, env: dict[str, str] | None = None, command: list[str] | None = None
) -> servers.Process:
    """`craftai web` on a free port in front of the services at `services`; its address is its URL.
    `command` runs it otherwise (a benchmark: `python -m craftai.cli`, where no console script is)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "craftai-web.address"
    variables = {
        "CRAFTAI_ADDRESS": services,
        "CRAFTAI_WEB_PORT": "0",
        "CRAFTAI_WEB_READY_FILE": str(ready),
        **(env or {}),
    }
    return servers.start("craftai-web", [*(command or [str(servers.BIN / "craftai")]), "web"], variables, workdir)


def both_features_store(sam_store: Path, sam_recipes: Path, u2netp_url: str, root: Path) -> tuple[Path, Path]:
    """A store with SAM (the random-weight fixture, both recipes) and u2netp: the SAM store's files
    linked (never modified), and a catalogue pinning both, u2netp fetched from `u2netp_url`."""
    store = root / "store"
    shutil.copytree(sam_store, store, copy_function=os.link)
    data = tomllib.loads(sam_recipes.read_text())
    for pinned in catalogues.recipe(data, "u2netp")["files"]:
        pinned["sources"] = [{"url": u2netp_url}]
    return store, catalogues.write(root / "recipes.toml", data)
