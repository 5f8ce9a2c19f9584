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
def _torchvision_models() -> Iterator[None]:
    """`from torchvision import models` answered while the network module is imported: by torchvision
    where it imports, else by a stand-in `models` (on the stand-in torchvision another reference may
    have left in sys.modules, or on one made here), everything put back as it was afterwards."""
    try:
        importlib.import_module("torchvision.models")
        real = True
    except (ImportError, OSError, RuntimeError):  # no torchvision, one that does not load, or a stand-in
        real = False
    if real:
        yield
        return
    saved = {name: sys.modules.get(name) for name in ("torchvision", "torchvision.models")}
    parent = saved["torchvision"] or types.ModuleType("torchvision")
    had = parent.__dict__.get("models")
    stand_in = types.ModuleType("torchvision.models")
    parent.models = stand_in  # type: ignore[attr-defined]
    sys.modules["torchvision"], sys.modules["torchvision.models"] = parent, stand_in
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        if had is None:
            parent.__dict__.pop("models", None)
        else:
            parent.models = had  # type: ignore[attr-defined]


def u2net_class() -> type[nn.Module]:
    """backgroundremover's U2NET class (the authors' network: in_ch=3, out_ch=1 by default)."""
    if MODULE not in sys.modules:
        spec = importlib.util.find_spec("backgroundremover") if "backgroundremover" not in sys.modules else None
        root = list(spec.submodule_search_locations or []) if spec else list(sys.modules["backgroundremover"].__path__)
        if not root:
            raise ModuleNotFoundError("backgroundremover is not installed (tools/install_references.sh installs it)")
        bare_package("backgroundremover", root)
        bare_package("backgroundremover.u2net", [f"{root[0]}/u2net"])
        with _torchvision_models():
            importlib.import_module(MODULE)
    cls: type[nn.Module] = sys.modules[MODULE].U2NET
    return cls
