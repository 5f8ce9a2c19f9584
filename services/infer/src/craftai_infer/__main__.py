"""Run the infer service alone: `craftai-infer` (settings from CRAFTAI_* variables)."""

from __future__ import annotations

import asyncio

from craftai_common.server import configure_logging, serve
from craftai_infer.service import build
from craftai_infer.settings import InferSettings


def main() -> int:
    settings = InferSettings()
    configure_logging(settings, "infer")
    return asyncio.run(serve(settings, [build(settings)]))


if __name__ == "__main__":
    raise SystemExit(main())
