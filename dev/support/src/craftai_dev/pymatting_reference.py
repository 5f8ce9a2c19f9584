"""pymatting's `estimate_foreground_ml`, the reference of the cutout's colours, without the rest of
pymatting.

pymatting's package `__init__` imports all of its modules, and their numba functions carry explicit
signatures, so importing the package compiles every one of them (alpha matting, Laplacians, solvers):
~40 s on a 2-core machine the first time, in each process that finds no numba cache yet (several at
once under pytest-xdist). The foreground estimation lives in one module that imports only numpy and
numba; loading that file alone compiles its three functions (~4 s) and runs the same code.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any


@functools.cache
def estimate_foreground_ml() -> Callable[..., Any]:
    """pymatting.estimate_foreground_ml, from its own module file (the package's `__init__` not run)."""
    spec = importlib.util.find_spec("pymatting")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pymatting is not installed (tools/bootstrap.sh --dev installs it)")
    folder = next(iter(spec.submodule_search_locations))
    path = f"{folder}/foreground/estimate_foreground_ml.py"
    module_spec = importlib.util.spec_from_file_location("craftai_dev._pymatting_foreground_ml", path)
    if module_spec is None or module_spec.loader is None:
        raise ModuleNotFoundError(f"pymatting's foreground module is not at {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    found: Callable[..., Any] = module.estimate_foreground_ml
    return found
