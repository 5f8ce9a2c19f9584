"""The client a command talks through: the app id and the address of the global options."""

from __future__ import annotations

import argparse

from craftai.client import AiClient


def connect(options: argparse.Namespace) -> AiClient:
    return AiClient(app_id=options.app_id, target=options.address)
