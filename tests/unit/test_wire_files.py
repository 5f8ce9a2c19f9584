"""craftai_wire.files: a small file replaced whole, with its mode from the start."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from craftai_wire.files import replace_text


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_the_file_is_replaced_with_its_mode_and_no_temporary_is_left(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "ready"
    path.write_text("old")
    umask = os.umask(0)
    os.umask(umask)  # read, then restored: the process's umask still applies to the mode asked
    replace_text(path, "new", mode=mode)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == mode & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready"]


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()  # a folder under the name: the rename fails
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        replace_text(target, "new")
    assert (target / "inside").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_a_reader_never_sees_a_part(tmp_path: Path) -> None:
    """A reader polling the file while it is rewritten sees one whole version or another."""
    path = tmp_path / "ready"
    versions = [f"{n:04d}" * 20_000 for n in range(60)]
    replace_text(path, versions[0])
    stop = threading.Event()
    seen: list[str] = []

    def read() -> None:
        while not stop.is_set():
            seen.append(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for text in versions[1:]:
            replace_text(path, text)
    finally:
        stop.set()
        reader.join(timeout=30)
    assert seen and set(seen) <= set(versions)
