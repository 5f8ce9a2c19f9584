"""Run the prepare service alone: `craftai-prepare` (settings from CRAFTAI_* variables)."""

from __future__ import annotations

import asyncio

from craftai_common.server import configure_logging, serve
from craftai_prepare.service import build
from craftai_prepare.settings import PrepareSettings


def main() -> int:
    settings = PrepareSettings()
    configure_logging(settings, "prepare")
    return asyncio.run(serve(settings, [build(settings)]))


if __name__ == "__main__":
    raise SystemExit(main())
