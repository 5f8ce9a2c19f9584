"""Debian's chromium, headless, driven by Playwright for Python: the page's tests and the
screenshots for docs/ launch it here. Playwright's own browser download is never used (this
machine reaches no such host): Playwright starts the executable `chromium()` finds, with flags
that keep it off the network, on a fresh profile folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

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
