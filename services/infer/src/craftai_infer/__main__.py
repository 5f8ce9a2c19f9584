"""Run the infer service alone: `craftai-infer` (settings from CRAFTAI_* variables)."""

from __future__ import annotations

import asyncio
from typing import NoReturn

from craftai_common.server import configure_logging, exit_process, serve
from craftai_infer.service import build
from craftai_infer.settings import InferSettings


def main() -> NoReturn:
    settings = InferSettings()
    configure_logging(settings, "infer")
    exit_process(asyncio.run(serve(settings, [build(settings)])))  # nothing of the models outlives the stop


if __name__ == "__main__":
    main()
