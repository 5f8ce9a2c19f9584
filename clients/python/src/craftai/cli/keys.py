"""`craftai keys add APP` and `craftai keys hash APP`: app keys, only their hashes kept by the servers."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from craftai_wire import keys
from craftai_wire.metadata import APP_ID_PATTERN


def cmd_keys_add(options: argparse.Namespace) -> int:
    """A new key for an app: its hash is added to the keys file, the key is printed once."""
    if options.app != keys.WILDCARD and not APP_ID_PATTERN.match(options.app):
        print(
            "craftai: an app id is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            file=sys.stderr,
        )
        return 2
    chosen = options.keys_file or os.environ.get("CRAFTAI_KEYS_FILE")
    path = Path(chosen) if chosen else keys.default_keys_file()
    key = keys.new_key()
    keys.add_key_line(path, keys.key_line(options.app, key))  # whole, atomically; servers re-read it within 1 s
    print(key)
    print(
        f"added a key for {options.app} to {path} (only its hash is kept there); give the key above to the app "
        "(CRAFTAI_APP_KEY or AiClient(app_key=...)): it is not shown again",
        file=sys.stderr,
    )
    return 0


def cmd_keys_hash(options: argparse.Namespace) -> int:
    """The keys-file line for a key read on standard input (for secrets made elsewhere)."""
    key = sys.stdin.readline().strip()
    if not key:
        print("craftai: give the key on standard input", file=sys.stderr)
        return 2
    print(keys.key_line(options.app, key), end="")
    return 0
