"""This machine's pip configuration as uv's options, so that uv installs from the same places pip
would (tools/installer.sh): pip's files and PIP_* variables, read by pip itself (`pip config list`).

    python tools/pip_sources.py        # one uv argument a line
    python tools/pip_sources.py cert   # the certificate bundle pip is told to trust ("" when none)

pip ignores an index folder or a constraints file that does not exist (it says so); so do these
options. Several indexes are searched for the best version of each package, as pip does (uv's own
default takes the first index that has the package). Standard library only: it runs before
anything is installed.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

# pip's option -> uv's (each value of a list given once)
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}


def pip_config() -> dict[str, list[str]]:
    """pip's effective settings, as pip lists them."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    return parse(listed)


def parse(listed: str) -> dict[str, list[str]]:
    """`pip config list` (`global.find-links='/opt/wheels'`, `:env:.find-links='...'`) -> option ->
    its values (a list option's values are separated by spaces); a later line wins, as PIP_*
    variables (listed last) win over files in pip."""
    settings: dict[str, list[str]] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if not value:
            continue
        name = key.rsplit(".", 1)[-1]  # global.find-links, install.constraint, :env:.find-links
        settings[name] = shlex.split(shlex.split(value)[0]) if value.strip() else []
    return settings


def present(location: str) -> bool:
    """A URL, or a file or folder that exists (a file:// URL's path included)."""
    parsed = urlparse(location)
    if parsed.scheme in ("http", "https"):
        return True
    return Path(parsed.path if parsed.scheme == "file" else location).exists()


def uv_arguments(settings: dict[str, list[str]]) -> list[str]:
    arguments: list[str] = []
    for option, flag in OPTIONS.items():
        for value in settings.get(option, []):
            if present(value):
                arguments += [flag, value]
    for constraint in settings.get("constraint", []):
        if Path(constraint).is_file():
            arguments += ["--constraint", constraint]
    if any(a in ("--index-url", "--extra-index-url") for a in arguments):
        arguments += ["--index-strategy", "unsafe-best-match"]
    return arguments


def main() -> None:
    settings = pip_config()
    if sys.argv[1:] == ["cert"]:
        print(next(iter(settings.get("cert", [])), ""))
        return
    print("\n".join(uv_arguments(settings)))


if __name__ == "__main__":
    main()
