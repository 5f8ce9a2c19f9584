"""Importing a reference implementation's modules without running its package's __init__.py
(which imports GUIs, data loaders or torchvision that the networks do not need)."""

from __future__ import annotations

import sys
import types


def bare_package(name: str, search_path: list[str]) -> types.ModuleType:
    """Register package `name` with its files but without executing its __init__.py."""
    module = types.ModuleType(name)
    module.__path__ = search_path
    module.__file__ = None
    sys.modules[name] = module
    return module
