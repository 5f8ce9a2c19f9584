"""Who may call: app keys checked on every RPC (docs/SECURITY.md).

The servers hold only SHA-256 hashes of keys (craftai_wire.keys). Sources, merged:

* the keys file (CRAFTAI_KEYS_FILE, default `<config>/keys`), re-read within a second of a change,
  so keys are added or revoked without a restart;
* CRAFTAI_KEYS: the same lines in the environment (separated by newlines or `;`), for
  orchestrators that hand secrets as variables;
* the service key (CRAFTAI_SERVICE_KEY), accepted for the app id `craftai-internal`: the id the
  services use when they call each other.

With no key configured at all (no CRAFTAI_KEYS_FILE, no CRAFTAI_KEYS, no file at the default
place), the first server to start generates a local key: `<config>/app.key` (the key, 0600) and
`<config>/keys` (its hash for `*`, 0600). The SDK and the `craftai` command read `app.key`, so a
local `craftai serve` works with no setting while nobody else on the network can call it.
CRAFTAI_AUTH=off turns the checks off (the app id is still required): for a deliberate, isolated
setup only; the server says so in its log at start.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from craftai_wire.keys import (
    HASH_PREFIX,
    MAX_KEY_LENGTH,
    WILDCARD,
    default_keys_file,
    key_hash,
    key_line,
    local_key_file,
    new_key,
    read_key_file,
    write_private,
)
from craftai_wire.metadata import APP_ID_PATTERN

log = logging.getLogger("craftai.auth")
INTERNAL_APP_ID = "craftai-internal"
_LINE = re.compile(r"^(?P<app>\S+)\s+(?P<hash>sha256:[0-9a-f]{64})$")
_PROCESS_KEY = "craftai_process_" + secrets.token_urlsafe(32)  # the service key when none is set
RELOAD_CHECK_SECONDS = 1.0


class KeysFileError(ValueError):
    """A keys file or CRAFTAI_KEYS entry that cannot be read; the message names the line."""


def parse_lines(text: str, origin: str) -> dict[str, list[str]]:
    """`{app id: [sha256 hex digests]}` from keys-file lines; KeysFileError naming a bad line."""
    entries: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        app = match.group("app") if match else ""
        if match is None or (app != WILDCARD and not APP_ID_PATTERN.match(app)):
            raise KeysFileError(
                f"{origin} line {number}: expected '<app id> sha256:<64 lowercase hex digits>' "
                "(make one with: craftai keys add <app id>)"
            )
        entries.setdefault(app, []).append(match.group("hash").removeprefix(HASH_PREFIX))
    return entries


def service_key() -> str:
    """The key this process sends as `craftai-internal`: CRAFTAI_SERVICE_KEY, else the local key,
    else a key made for this process only (enough when the services share one process)."""
    return os.environ.get("CRAFTAI_SERVICE_KEY") or read_key_file(local_key_file()) or _PROCESS_KEY


@dataclass(frozen=True)
class Verdict:
    ok: bool
    problem: str = ""  # "missing" or "wrong" when not ok


class KeyRing:
    """The accepted key hashes per app id, and the constant-time check of a presented key."""

    def __init__(self, file: Path | None, inline: str = "", *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.file = file
        self._inline = parse_lines(inline.replace(";", "\n"), "CRAFTAI_KEYS") if inline else {}
        self._from_file: dict[str, list[str]] = {}
        self._stamp: tuple[int, int] | None = None
        self._checked_at = 0.0
        self._entries: dict[str, list[str]] = {}
        self._service_hash = key_hash(service_key()).removeprefix(HASH_PREFIX)
        self._load()

    @classmethod
    def configure(cls, keys_file: Path | None, inline: str, enabled: bool) -> KeyRing:
        """The key ring of a starting server, generating the local key when nothing is configured."""
        if not enabled:
            log.warning("CRAFTAI_AUTH=off: app keys are not checked; any caller that names an app id is served")
            return cls(None, enabled=False)
        if keys_file is not None and not keys_file.exists():
            raise KeysFileError(
                f"CRAFTAI_KEYS_FILE={keys_file} does not exist: create it with "
                f"'craftai keys add <app id> --keys-file {keys_file}', or unset CRAFTAI_KEYS_FILE"
            )
        path = keys_file or default_keys_file()
        if keys_file is None and not inline and not path.exists():
            ensure_local_key(path)
        return cls(path if path.exists() else None, inline)

    @property
    def apps(self) -> list[str]:
        return sorted(self._entries)

    def _load(self) -> None:
        from_file: dict[str, list[str]] = {}
        stamp = None
        if self.file is not None:
            stat = self.file.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            from_file = parse_lines(self.file.read_text(), str(self.file))
            mode = stat.st_mode & 0o077
            if mode:
                log.warning("the keys file %s can be read by other users (mode %o); chmod 600 it", self.file, mode)
        entries = {app: list(hashes) for app, hashes in from_file.items()}
        for app, hashes in self._inline.items():
            entries.setdefault(app, []).extend(hashes)
        entries.setdefault(INTERNAL_APP_ID, []).append(self._service_hash)
        self._from_file, self._stamp, self._entries = from_file, stamp, entries

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if self.file is None or now - self._checked_at < RELOAD_CHECK_SECONDS:
            return
        self._checked_at = now
        try:
            stat = self.file.stat()
            if (stat.st_mtime_ns, stat.st_size) != self._stamp:
                self._load()
                log.info("keys file %s re-read: %d app id(s)", self.file, len(self._entries))
        except (OSError, KeysFileError) as exc:
            log.error("keys file %s not re-read, the previous keys stay in force: %s", self.file, exc)
            self._stamp = None if isinstance(exc, OSError) else self._stamp

    def check(self, app_id: str, key: str | None) -> Verdict:
        """Whether `key` is one of `app_id`'s keys (or a `*` key when the app has none of its own)."""
        if not self.enabled:
            return Verdict(True)
        if not key:
            return Verdict(False, "missing")
        self._maybe_reload()
        if len(key) > MAX_KEY_LENGTH:
            return Verdict(False, "wrong")
        candidates = self._entries.get(app_id)
        if candidates is None:
            candidates = self._entries.get(WILDCARD, []) if app_id != INTERNAL_APP_ID else []
        digest = hashlib.sha256(key.encode()).hexdigest()
        matched = False
        for candidate in candidates:  # every candidate compared, in constant time each
            matched |= hmac.compare_digest(candidate, digest)
        return Verdict(True) if matched else Verdict(False, "wrong")


def ensure_local_key(keys_file: Path) -> None:
    """Generate the local key (if no process did yet) and a keys file accepting it for any app id."""
    key_path = local_key_file()
    key = read_key_file(key_path)
    if key is None:
        created = write_private(key_path, new_key() + "\n")
        key = read_key_file(key_path)
        if key is None:  # pragma: no cover - the file was just written
            raise KeysFileError(f"could not read the local key back from {key_path}")
        if created:
            log.info("generated the local app key in %s (mode 0600)", key_path)
    header = (
        "# craft-ai app keys: '<app id> sha256:<hash of the key>' per line; '*' = any app id without its own line.\n"
        "# Only hashes are kept here. Add a key with: craftai keys add <app id>\n"
    )
    if write_private(keys_file, header + key_line(WILDCARD, key)):
        log.info("generated the keys file %s: the local key in %s is accepted for every app id", keys_file, key_path)
