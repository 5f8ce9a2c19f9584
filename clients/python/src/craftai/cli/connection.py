"""The client a command talks through: the app id and the address of the global options (none:
the local server, started by the first command that finds none unless the command only looks)."""

from __future__ import annotations

import argparse

from craftai.client import AiClient


def connect(options: argparse.Namespace, *, start_server: bool = True) -> AiClient:
    return AiClient(app_id=options.app_id, target=options.address, start_server=start_server)
