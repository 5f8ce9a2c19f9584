"""The authors' U²-Net (Qin et al., Pattern Recognition 2020; xuebinqin/U-2-Net `model/u2net.py`,
class U2NET) as backgroundremover ships it, importable without its package and without torchvision.

backgroundremover is a test-only dependency, installed with --no-deps (tools/install_references.sh).
Its package `__init__` is not run (a bare parent package is registered instead), and the network
module's `from torchvision import models`, which U2NET never uses, is answered by a stand-in module
only while the network module is imported, where torchvision does not import beside the CPU torch.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator

from torch import nn

from craftai_dev.bare_import import bare_package

MODULE = "backgroundremover.u2net.u2net"


@contextlib.contextmanager
def _torchvision_models_if_missing() -> Iterator[None]:
    try:
        importlib.import_module("torchvision")
        yield
        return
    except ImportError:
        pass
    stand_in = types.ModuleType("torchvision")
    stand_in.models = types.ModuleType("torchvision.models")  # type: ignore[attr-defined]
    sys.modules["torchvision"] = stand_in
    try:
        yield
    finally:
        sys.modules.pop("torchvision", None)


def u2net_class() -> type[nn.Module]:
    """backgroundremover's U2NET class (the authors' network: in_ch=3, out_ch=1 by default)."""
    if MODULE not in sys.modules:
        spec = importlib.util.find_spec("backgroundremover")
        if spec is None or spec.submodule_search_locations is None:
            raise ModuleNotFoundError("backgroundremover is not installed (tools/install_references.sh installs it)")
        root = list(spec.submodule_search_locations)
        bare_package("backgroundremover", root)
        bare_package("backgroundremover.u2net", [f"{root[0]}/u2net"])
        with _torchvision_models_if_missing():
            importlib.import_module(MODULE)
    cls: type[nn.Module] = sys.modules[MODULE].U2NET
    return cls
