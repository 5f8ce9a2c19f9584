"""`craftai serve`: the three services on one port with one store folder (the embedded default).

The service packages are optional dependencies of the SDK (`pip install craftai[server]`).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from craftai.web.settings import WebSettings


def run(host: str | None, port: int | None, store: Path | None, web: WebSettings | None = None) -> int:
    """Serve until SIGTERM or Ctrl-C; with `web`, the web gateway too (its own port), calling these
    services at the address they listen on."""
    try:
        from craftai_catalogue import service as catalogue
        from craftai_catalogue.settings import CatalogueSettings
        from craftai_common.server import configure_logging, serve
        from craftai_infer import service as infer
        from craftai_infer.settings import InferSettings
        from craftai_prepare import service as prepare
        from craftai_prepare.settings import PrepareSettings
    except ImportError as exc:
        raise SystemExit(f"craftai serve needs the service packages (pip install 'craftai[server]'): {exc}") from exc

    overrides = {k: v for k, v in (("host", host), ("port", port), ("store", store)) if v is not None}
    infer_settings = InferSettings(**overrides)  # type: ignore[arg-type]
    configure_logging(infer_settings, "serve")
    mounts = [
        catalogue.build(CatalogueSettings(**overrides), embedded=True),  # type: ignore[arg-type]
        prepare.build(PrepareSettings(**overrides), embedded=True),  # type: ignore[arg-type]
        infer.build(infer_settings, embedded=True),
    ]
    beside = None
    if web is not None:
        from craftai.web.server import serving

        def beside(address: str) -> contextlib.AbstractAsyncContextManager[str]:
            return serving(web.model_copy(update={"target": web.target or address}))

    return asyncio.run(serve(infer_settings, mounts, beside))
