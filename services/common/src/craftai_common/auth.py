"""Who may call: app keys checked on every RPC (docs/SECURITY.md).

The servers hold only SHA-256 hashes of keys (craftai_wire.keys). Sources, merged:

* the keys file (CRAFTAI_KEYS_FILE, default `<config>/keys`), read again within a second of any
  change of its content (compared by hash, so an edit that keeps its size and time is seen too),
  so keys are added or revoked without a restart; a deleted or unreadable file means no keys from
  it (logged), a broken edit keeps the keys in force (logged);
* CRAFTAI_KEYS: the same lines in the environment (separated by newlines or `;`), for
  orchestrators that hand secrets as variables;
* the service key (CRAFTAI_SERVICE_KEY, else `<config>/service.key`), accepted for the app id
  `craftai-internal` only, and the only key accepted for it (the wildcard never is, and neither
  CRAFTAI_AUTH=off nor the local key makes a caller one of the services).

With no key configured at all (no CRAFTAI_KEYS_FILE, no CRAFTAI_KEYS, no file at the default
place), the first server to start generates a local key: `<config>/app.key` (the key, 0600),
`<config>/keys` (its hash for `*`, 0600) and `<config>/service.key` (the services' own key, 0600).
The SDK and the `craftai` command read `app.key`, so a local `craftai serve` works with no setting
while nobody else on the network can call it. CRAFTAI_AUTH=off turns the checks of app keys off
(the app id is still required): for a deliberate, isolated setup only; the server says so in its
log at start.
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
    service_key_file,
    write_private,
)
from craftai_wire.metadata import APP_ID_PATTERN

log = logging.getLogger("craftai.auth")
INTERNAL_APP_ID = "craftai-internal"
_LINE = re.compile(r"(?P<app>\S+)\s+(?P<hash>sha256:[0-9a-f]{64})\Z")
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
    """The key this process sends as `craftai-internal`: CRAFTAI_SERVICE_KEY, else the local
    services' key (`<config>/service.key`), else a key made for this process only (enough when the
    services share one process). Never the local app key: whoever holds that one is an app."""
    return os.environ.get("CRAFTAI_SERVICE_KEY") or read_key_file(service_key_file()) or _PROCESS_KEY


@dataclass(frozen=True)
class Verdict:
    ok: bool
    problem: str = ""  # "missing" or "wrong" when not ok
    wildcard: bool = False  # admitted by a `*` key (any app id), or with keys off: not a known app


class KeyRing:
    """The accepted key hashes per app id, and the constant-time check of a presented key."""

    def __init__(self, file: Path | None, inline: str = "", *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.file = file
        self._inline = parse_lines(inline.replace(";", "\n"), "CRAFTAI_KEYS") if inline else {}
        self._digest: str | None = None  # SHA-256 of the file's content in force ("" when absent)
        self._checked_at = 0.0
        self._entries: dict[str, list[str]] = {}
        self._service_hash = key_hash(service_key()).removeprefix(HASH_PREFIX)
        self._load()

    @classmethod
    def configure(cls, keys_file: Path | None, inline: str, enabled: bool) -> KeyRing:
        """The key ring of a starting server, generating the local key when nothing is configured."""
        if not enabled:
            log.warning("CRAFTAI_AUTH=off: app keys are not checked; any caller that names an app id is served")
            ensure_service_key()  # calls between the services are still checked
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
        """Read the file now (at start: a broken file stops the server, raising KeysFileError)."""
        from_file: dict[str, list[str]] = {}
        digest = ""
        if self.file is not None:
            data = self.file.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            from_file = parse_lines(data.decode(errors="replace"), str(self.file))
            mode = self.file.stat().st_mode & 0o077
            if mode:
                log.warning("the keys file %s can be read by other users (mode %o); chmod 600 it", self.file, mode)
        self._use(from_file, digest)

    def _use(self, from_file: dict[str, list[str]], digest: str) -> None:
        entries = {app: list(hashes) for app, hashes in from_file.items()}
        for app, hashes in self._inline.items():
            entries.setdefault(app, []).extend(hashes)
        entries[INTERNAL_APP_ID] = [self._service_hash]  # a keys-file line never makes a service
        self._digest, self._entries = digest, entries

    def _maybe_reload(self) -> None:
        """Within a second of any change of the file's content: its keys, or none when it is gone."""
        now = time.monotonic()
        if self.file is None or now - self._checked_at < RELOAD_CHECK_SECONDS:
            return
        self._checked_at = now
        try:
            data = self.file.read_bytes()
        except OSError as exc:  # deleted or unreadable: fail closed, say so once
            if self._digest != "":
                log.error(
                    "keys file %s cannot be read (%s): no app key from it is accepted until it is back",
                    self.file,
                    exc.strerror or exc,
                )
                self._use({}, "")
            return
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._digest:
            return
        try:
            from_file = parse_lines(data.decode(errors="replace"), str(self.file))
        except KeysFileError as exc:
            log.error("keys file %s not re-read, the previous keys stay in force: %s", self.file, exc)
            self._digest = digest  # logged once per broken content
            return
        self._use(from_file, digest)
        log.info("keys file %s re-read: %d app id(s)", self.file, len(self._entries))

    def check(self, app_id: str, key: str | None) -> Verdict:
        """Whether `key` is one of `app_id`'s keys (or a `*` key when the app has none of its own).

        `craftai-internal` needs the service key, whatever else is configured (keys off included)."""
        internal = app_id == INTERNAL_APP_ID
        if not self.enabled and not internal:
            return Verdict(True, wildcard=True)
        if not key:
            return Verdict(False, "missing")
        self._maybe_reload()
        if len(key) > MAX_KEY_LENGTH:
            return Verdict(False, "wrong")
        candidates = self._entries.get(app_id)
        wildcard = candidates is None
        if candidates is None:
            candidates = self._entries.get(WILDCARD, []) if not internal else []
        digest = hashlib.sha256(key.encode()).hexdigest()
        matched = False
        for candidate in candidates:  # every candidate compared, in constant time each
            matched |= hmac.compare_digest(candidate, digest)
        return Verdict(True, wildcard=wildcard) if matched else Verdict(False, "wrong")


def ensure_local_key(keys_file: Path) -> None:
    """Generate the local key (if no process did yet), a keys file accepting it for any app id, and
    the local services' own key (distinct from the local key)."""
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
    ensure_service_key()


def ensure_service_key() -> None:
    """The local services' own key (`<config>/service.key`), made once, unless CRAFTAI_SERVICE_KEY is set."""
    if os.environ.get("CRAFTAI_SERVICE_KEY"):
        return
    try:
        if write_private(service_key_file(), new_key() + "\n"):
            log.info("generated the local services' key in %s (mode 0600)", service_key_file())
    except OSError as exc:  # a read-only config folder: this process's own key, said once
        log.warning("cannot write %s (%s): the services use a key of this process only", service_key_file(), exc)
