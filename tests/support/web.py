"""The web gateway on loopback for the tests: `craftai web` as a real process in front of real
services, and Debian's chromium driven by Playwright (launched with that executable: Playwright's
own browser download is never used; the flags keep it off the network)."""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support import catalogues, servers

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Playwright

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """Debian's chromium (tools/bootstrap.sh --dev installs it), or CRAFTAI_TEST_CHROMIUM."""
    return os.environ.get("CRAFTAI_TEST_CHROMIUM") or shutil.which("chromium")


def launch(playwright: Playwright, profile: Path, **options: object) -> BrowserContext:
    """One headless chromium on a fresh profile folder (Playwright passes it as --user-data-dir)."""
    executable = chromium()
    assert executable, "chromium is not installed: run tools/bootstrap.sh --dev (it apt-get installs it)"
    profile.mkdir(parents=True, exist_ok=True)
    assert not any(profile.iterdir()), f"{profile} is not a fresh profile"
    return playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=executable,
        args=CHROMIUM_FLAGS,
        headless=True,
        **options,  # type: ignore[arg-type]
    )


def gateway(services: str, workdir: Path, env: dict[str, str] | None = None) -> servers.Process:
    """`craftai web` on a free port in front of the services at `services`; its address is its URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "craftai-web.address"
    variables = {
        "CRAFTAI_ADDRESS": services,
        "CRAFTAI_WEB_PORT": "0",
        "CRAFTAI_WEB_READY_FILE": str(ready),
        **(env or {}),
    }
    return servers.start("craftai-web", [str(servers.BIN / "craftai"), "web"], variables, workdir)


def both_features_store(sam_store: Path, sam_recipes: Path, u2netp_url: str, root: Path) -> tuple[Path, Path]:
    """A store with SAM (the random-weight fixture, both recipes) and u2netp: the SAM store's files
    linked (never modified), and a catalogue pinning both, u2netp fetched from `u2netp_url`."""
    store = root / "store"
    shutil.copytree(sam_store, store, copy_function=os.link)
    data = tomllib.loads(sam_recipes.read_text())
    for pinned in catalogues.recipe(data, "u2netp")["files"]:
        pinned["sources"] = [{"url": u2netp_url}]
    return store, catalogues.write(root / "recipes.toml", data)
