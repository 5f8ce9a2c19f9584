"""App keys: the keys file, the constant-time check, the generated local key, re-reading on change."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from craftai import cli
from craftai_common import auth
from craftai_common.auth import INTERNAL_APP_ID, KeyRing, KeysFileError, ensure_local_key, parse_lines
from craftai_common.interceptors import REQUEST_ID_PATTERN
from craftai_wire.keys import is_loopback, key_hash, key_line, new_key, read_key_file, write_private
from craftai_wire.metadata import APP_ID_PATTERN


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRAFTAI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("CRAFTAI_SERVICE_KEY", raising=False)
    monkeypatch.delenv("CRAFTAI_APP_KEY_FILE", raising=False)
    return tmp_path / "config"


def test_a_key_is_random_and_its_line_holds_only_the_hash() -> None:
    key = new_key()
    assert key.startswith("craftai_") and len(key) > 40 and new_key() != key
    line = key_line("my-editor", key)
    assert key not in line and line == f"my-editor {key_hash(key)}\n"
    assert parse_lines(line, "test") == {"my-editor": [key_hash(key).removeprefix("sha256:")]}


@pytest.mark.parametrize(
    "text",
    ["my-editor", "my-editor sha256:abc", "bad id! sha256:" + "0" * 64, "x md5:" + "0" * 64, "x sha256:" + "A" * 64],
)
def test_a_bad_line_is_named(text: str) -> None:
    with pytest.raises(KeysFileError, match="line 2: expected '<app id> sha256:<64 lowercase hex digits>'"):
        parse_lines("# comment\n" + text, "keys")


def test_each_app_its_own_keys_and_the_wildcard_for_the_others(config: Path, tmp_path: Path) -> None:
    editor, editor_next, anyone = new_key(), new_key(), new_key()
    keys = tmp_path / "keys"
    keys.write_text(key_line("editor", editor) + key_line("editor", editor_next) + key_line("*", anyone))
    ring = KeyRing(keys)
    assert ring.check("editor", editor).ok and ring.check("editor", editor_next).ok  # rotation: two keys
    assert ring.check("editor", anyone) == auth.Verdict(False, "wrong")  # has its own keys: * does not apply
    assert ring.check("batch", anyone).ok and not ring.check("batch", editor).ok
    assert ring.check("batch", None) == auth.Verdict(False, "missing")
    assert ring.check("batch", "x" * 10_000) == auth.Verdict(False, "wrong")  # not even hashed
    assert not ring.check(INTERNAL_APP_ID, anyone).ok  # the wildcard never makes a service
    assert ring.check(INTERNAL_APP_ID, auth.service_key()).ok


def test_keys_from_the_environment_and_the_service_key(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one, two, service = new_key(), new_key(), new_key()
    monkeypatch.setenv("CRAFTAI_SERVICE_KEY", service)
    ring = KeyRing(None, key_line("one", one).strip() + ";" + key_line("two", two).strip())
    assert ring.check("one", one).ok and ring.check("two", two).ok and not ring.check("one", two).ok
    assert ring.check(INTERNAL_APP_ID, service).ok and not ring.check(INTERNAL_APP_ID, one).ok


def test_auth_off_accepts_any_caller(config: Path) -> None:
    ring = KeyRing.configure(None, "", enabled=False)
    assert ring.check("anyone", None).ok and not (config / "keys").exists()


def test_the_local_key_is_generated_once_private_and_accepted_for_any_app(config: Path) -> None:
    ring = KeyRing.configure(None, "", enabled=True)
    key = read_key_file(config / "app.key")
    assert key is not None and ring.check("my-editor", key).ok and ring.check("tests", key).ok
    for path in (config / "app.key", config / "keys", config):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
    assert key not in (config / "keys").read_text()
    again = KeyRing.configure(None, "", enabled=True)  # a second server: the same key, nothing rewritten
    assert read_key_file(config / "app.key") == key and again.check("x", key).ok
    ensure_local_key(config / "keys")  # a racing process finds both files there and keeps them
    assert read_key_file(config / "app.key") == key
    # Local services call each other with their own key, never the local app key (issue 14: whoever
    # held the local key could call as craftai-internal, with no limit, while the server drained).
    service = read_key_file(config / "service.key")
    assert service is not None and service != key and auth.service_key() == service
    assert ring.check(INTERNAL_APP_ID, service).ok and not ring.check(INTERNAL_APP_ID, key).ok
    assert stat.S_IMODE((config / "service.key").stat().st_mode) == 0o600


def test_an_explicit_keys_file_must_exist(config: Path, tmp_path: Path) -> None:
    with pytest.raises(KeysFileError, match="does not exist: create it with 'craftai keys add"):
        KeyRing.configure(tmp_path / "missing", "", enabled=True)
    assert not (config / "app.key").exists()


def test_inline_keys_alone_generate_nothing(config: Path) -> None:
    key = new_key()
    ring = KeyRing.configure(None, key_line("one", key), enabled=True)
    assert ring.check("one", key).ok and not (config / "app.key").exists()


def test_the_file_is_read_again_when_it_changes(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "RELOAD_CHECK_SECONDS", 0.0)
    first, second = new_key(), new_key()
    keys = tmp_path / "keys"
    keys.write_text(key_line("app", first))
    ring = KeyRing(keys)
    assert ring.check("app", first).ok and not ring.check("app", second).ok
    time.sleep(0.01)
    keys.write_text(key_line("app", second))  # first revoked, second added
    os.utime(keys, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert ring.check("app", second).ok and not ring.check("app", first).ok
    keys.write_text("garbage\n")  # a broken edit: the keys in force stay
    os.utime(keys, ns=(time.time_ns(), time.time_ns() + 2_000_000))
    assert ring.check("app", second).ok


def test_write_private_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "file"
    assert write_private(path, "one") and not write_private(path, "two")
    assert path.read_text() == "one" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(path.parent.iterdir()) == [path]  # no temporary left behind


@pytest.mark.parametrize(
    ("target", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.3.4.5:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("ipv4:127.0.0.1:5", True),
        ("dns:///localhost:5", True),
        ("ipv4:127.0.0.1:5,127.0.0.1:6", True),  # several replicas on this machine
        ("ipv4:127.0.0.1:5,10.0.0.2:6", False),
        ("10.0.0.2:50051", False),
        ("infer.example:443", False),
        ("[2001:db8::1]:50051", False),
    ],
)
def test_the_local_key_goes_only_to_loopback(target: str, loopback: bool) -> None:
    assert is_loopback(target) is loopback


def test_craftai_internal_needs_the_service_key_even_with_keys_off(config: Path) -> None:
    ring = KeyRing.configure(None, "", enabled=False)
    assert ring.check("anyone", None).ok
    assert not ring.check(INTERNAL_APP_ID, None).ok and not ring.check(INTERNAL_APP_ID, new_key()).ok
    assert ring.check(INTERNAL_APP_ID, auth.service_key()).ok
    assert (config / "service.key").exists()  # separate local services share it


def test_an_edit_that_keeps_size_and_time_is_seen_and_a_deleted_file_means_no_keys(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "RELOAD_CHECK_SECONDS", 0.0)
    first, second = new_key(), new_key()
    keys = tmp_path / "keys"
    keys.write_text(key_line("app", first))
    before = keys.stat()
    ring = KeyRing(keys)
    assert ring.check("app", first).ok
    keys.write_text(key_line("app", second))  # same length, then the same times back (as `cp -p` leaves it)
    os.utime(keys, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (keys.stat().st_size, keys.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert ring.check("app", second).ok and not ring.check("app", first).ok
    keys.unlink()  # revoked: every key of the file, at once
    assert not ring.check("app", second).ok
    assert ring.check(INTERNAL_APP_ID, auth.service_key()).ok  # the services still reach each other
    keys.write_text(key_line("app", first))
    assert ring.check("app", first).ok


def test_keys_add_never_joins_the_last_line_and_replaces_the_file_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys"
    one = new_key()
    keys.write_text(key_line("one", one).rstrip("\n"))  # edited by hand: no final newline
    keys.chmod(0o640)
    inode = keys.stat().st_ino
    assert cli.main(["keys", "add", "two", "--keys-file", str(keys)]) == 0
    two = capsys.readouterr().out.strip()
    assert keys.read_text() == key_line("one", one) + key_line("two", two)
    assert parse_lines(keys.read_text(), "keys") == {
        "one": [key_hash(one).removeprefix("sha256:")],
        "two": [key_hash(two).removeprefix("sha256:")],
    }
    assert keys.stat().st_ino != inode and stat.S_IMODE(keys.stat().st_mode) == 0o640  # renamed over, mode kept
    fresh = tmp_path / "new" / "keys"
    assert cli.main(["keys", "add", "one", "--keys-file", str(fresh)]) == 0
    one = capsys.readouterr().out.strip()
    assert fresh.read_text() == key_line("one", one) and stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert sorted(p.name for p in fresh.parent.iterdir()) == [".keys.lock", "keys"]  # no temporary left


@pytest.mark.parametrize("value", ["rawnl\n", "app\r", "app\n\n", " app", "app id", "a" * 65])
def test_an_app_id_or_request_id_must_match_whole(value: str) -> None:
    assert not APP_ID_PATTERN.match(value)
    assert not REQUEST_ID_PATTERN.match(value.replace(" ", "\n") + "\n")
