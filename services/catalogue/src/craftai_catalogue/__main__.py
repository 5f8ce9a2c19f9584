"""Run the catalogue service alone: `craftai-catalogue` (settings from CRAFTAI_* variables)."""

from __future__ import annotations

import asyncio
import sys

from craftai_catalogue.recipes import CatalogueDataError
from craftai_catalogue.service import build
from craftai_catalogue.settings import CatalogueSettings
from craftai_common.server import configure_logging, serve


def main() -> int:
    settings = CatalogueSettings()
    configure_logging(settings, "catalogue")
    try:
        mount = build(settings)
    except CatalogueDataError as exc:
        print(f"craftai-catalogue: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(settings, [mount]))


if __name__ == "__main__":
    raise SystemExit(main())
