"""The page's address, announced once the gateway serves, without the key ever reaching a log.

On a loopback gateway with a local key, the key rides in the link's fragment (browsers never send a
fragment to a server; the page reads it and removes it from the address bar). The link is printed
only when the output is a terminal; otherwise the address alone is printed, with where the link is:
`<config>/web.link`, a file only its user can read (mode 0600, in the folder of the local key),
removed when the gateway stops.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from urllib.parse import quote

from craftai_wire.files import replace_text
from craftai_wire.keys import config_dir, is_loopback, local_key_file, read_key_file


def link_file() -> Path:
    return config_dir() / "web.link"


def write_private(path: Path, text: str) -> None:
    """`path` replaced by `text`, created 0600 (in a 0700 folder) before a byte is written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    replace_text(path, text, mode=0o600)


def announce(url: str, host: str) -> str | None:
    """Print where the page is (see the module's docstring); answers the link written to a file."""
    key = read_key_file(local_key_file()) if is_loopback(host) else None
    if key is None:
        print(f"craftai web: the page and the HTTP API on {url}/", flush=True)
        return None
    link = f"{url}/#key={quote(key)}"
    if sys.stdout.isatty():
        print(f"craftai web: the page and the HTTP API on {link}", flush=True)
        return None
    write_private(link_file(), link + "\n")
    print(
        f"craftai web: the page and the HTTP API on {url}/ (the link with the local key: {link_file()}, "
        "readable only by you)",
        flush=True,
    )
    return link


def forget(link: str) -> None:
    """The link file removed, if it still holds `link` (another gateway may have written its own)."""
    with contextlib.suppress(OSError):
        if link_file().read_text().strip() == link:
            link_file().unlink()
