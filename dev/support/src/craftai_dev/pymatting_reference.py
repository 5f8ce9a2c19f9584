"""pymatting's `estimate_foreground_ml`, the reference of the cutout's colours, without the rest of
pymatting.

pymatting's package `__init__` imports all of its modules, and their numba functions carry explicit
signatures, so importing the package compiles every one of them (alpha matting, Laplacians, solvers):
~40 s on a 2-core machine the first time, in each process that finds no numba cache yet (several at
once under pytest-xdist). The foreground estimation lives in one module that imports only numpy and
numba; importing it under its own name with bare parent packages (their `__init__` not run)
compiles its three functions (~4 s) and runs the same code. Its own name matters: numba's cache
records the module of each compiled function and imports it again by that name when another process
loads the cache.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from craftai_dev.bare_import import bare_package

MODULE = "pymatting.foreground.estimate_foreground_ml"


@functools.cache
def estimate_foreground_ml() -> Callable[..., Any]:
    """pymatting.estimate_foreground_ml from its own module (pymatting's `__init__` not run here,
    unless pymatting was imported already)."""
    if "pymatting" not in sys.modules:
        spec = importlib.util.find_spec("pymatting")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("pymatting is not installed (tools/bootstrap.sh --dev installs it)")
        folder = next(iter(spec.submodule_search_locations))
        bare_package("pymatting", [folder])
        bare_package("pymatting.foreground", [f"{folder}/foreground"])
    found: Callable[..., Any] = importlib.import_module(MODULE).estimate_foreground_ml
    return found
