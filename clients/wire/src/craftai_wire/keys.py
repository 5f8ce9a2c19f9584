"""App keys: their format, their hash, and where the local key lives (docs/SECURITY.md).

Each app id has one or more keys. A key is a random 256-bit token made by `new_key()`; the servers
keep only its SHA-256 (`key_hash`), so a keys file cannot be turned back into keys. A fast hash is
enough because keys are random tokens, never passwords chosen by people.

The keys file has one line per key, `<app id> sha256:<64 hex digits>`; `*` as the app id accepts
that key for every app id that has no line of its own (the local machine key that `craftai serve`
generates). Blank lines and lines starting with `#` are ignored.

The local key (plain text, mode 0600) is `<config>/app.key`, where `<config>` is
CRAFTAI_CONFIG_DIR, else $XDG_CONFIG_HOME/craftai, else ~/.config/craftai. The SDK sends it only
over TLS to a loopback server that proves to be the local server (craftai_wire.local_tls): a
remote server, or a program that took the local port, never receives it. The services call each
other with a different key, the service key (`<config>/service.key` for local services), so the
local key never makes a caller one of the services.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from craftai_wire.files import replace_text

KEY_PREFIX = "craftai_"
MAX_KEY_LENGTH = 256
WILDCARD = "*"
HASH_PREFIX = "sha256:"


def config_dir() -> Path:
    """Where the local key and the generated keys file live."""
    explicit = os.environ.get("CRAFTAI_CONFIG_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "craftai"


def default_keys_file() -> Path:
    return config_dir() / "keys"


def local_key_file() -> Path:
    explicit = os.environ.get("CRAFTAI_APP_KEY_FILE")
    return Path(explicit) if explicit else config_dir() / "app.key"


def service_key_file() -> Path:
    """The key local services present to each other as `craftai-internal` (never the local key)."""
    return config_dir() / "service.key"


def new_key() -> str:
    """A new random key (256 bits), recognisable by its prefix in secret scanners."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    """What a keys file stores for a key: `sha256:<hex>`."""
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def key_line(app_id: str, key: str) -> str:
    return f"{app_id} {key_hash(key)}\n"


def read_key_file(path: Path) -> str | None:
    """The key in a key file (first non-empty line), or None when there is none."""
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    return None


def is_loopback(target: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost targets (with or without a port or a scheme), and
    for an address list (`ipv4:a:p,b:p`: several replicas) whose every address is one."""
    host = target
    for scheme in ("dns:///", "ipv4:", "ipv6:", "dns:"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
    if "," in host and target.startswith(("ipv4:", "ipv6:")):
        return all(is_loopback(item) for item in host.split(","))
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside `path` (its own file: `path` itself is replaced by renames)."""
    lock = path.with_name(f".{path.name}.lock")
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def add_key_line(path: Path, line: str) -> None:
    """Add one keys-file line to `path` (created 0600 in a 0700 folder when absent).

    The new file is written whole beside the old one and renamed over it, so a server re-reading
    the file sees the old content or the new, never half of it; the old content gets a final
    newline first, so the new line never joins the last one. Two `craftai keys add` at once are
    serialised by a lock; the file's mode is kept (0600 for a new one).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(path):
        try:
            old = path.read_text()
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            old, mode = "", 0o600
        if old and not old.endswith("\n"):
            old += "\n"
        text = old + line.rstrip("\n") + "\n"
        replace_text(path, text, mode=mode)


def write_private(path: Path, text: str) -> bool:
    """Create `path` with mode 0600 holding `text`, atomically and only if it does not exist yet.

    Returns False when another process created it first (its content is then the one to use)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)  # atomic, and fails if the file exists: never half a file
        except FileExistsError:
            return False
        return True
    finally:
        temporary.unlink(missing_ok=True)
