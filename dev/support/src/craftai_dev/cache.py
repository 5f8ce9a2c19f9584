"""The checkout's .cache/ folder: model files, photos and fixtures, each made once and kept.

This package is used from the checkout it lives in (installed editable by tools/bootstrap.sh
--dev, or put on PYTHONPATH by tools/gpu/run_all.sh and run_tests.sh), so that every process of a
test run, a benchmark and the GPU scripts shares one cache: the folder is found from this file.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]  # dev/support/src/craftai_dev/cache.py
CACHE = REPO / ".cache"

if not (REPO / "dev" / "support" / "src" / "craftai_dev").is_dir():
    raise ImportError(
        f"craftai_dev is imported from {Path(__file__).parent}, outside a checkout: install it editable "
        "(tools/bootstrap.sh --dev) or put dev/support/src on PYTHONPATH"
    )


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """A cross-process lock under .cache/: processes running side by side (pytest-xdist's workers,
    tools/bench) make each cached file once, and never write it at the same time."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f".{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock
