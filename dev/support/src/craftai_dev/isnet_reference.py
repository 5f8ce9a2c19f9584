"""The IS-Net references (Qin et al., "Highly Accurate Dichotomous Image Segmentation", ECCV 2022),
importable without their packages.

- `dis_class`: the DIS authors' ISNetDIS (xuebinqin/DIS `IS-Net/models/isnet.py`) as dis-inference
  ships it: the first convolution's output goes to stage 1 unpooled, each side output is returned
  with the sigmoid applied. rembg's isnet-general-use is this network.
- `anime_class`: SkyTNT's variant (SkyTNT/anime-segmentation `model/isnet.py`) as anime-seg ships it:
  the same layers, but pooled once after the first convolution, and the side outputs returned as
  logits (SkyTNT's export applies the sigmoid to the first: `AnimeSegmentation.forward`). rembg's
  isnet-anime is SkyTNT's `isnetis.onnx`.

Both packages are test-only, installed with --no-deps (tools/install_references.sh). Their package
`__init__` files are not run (they import CLIs, downloaders and pipelines the networks do not need):
bare parent packages are registered instead, and only the network modules, which import torch
alone, are executed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from torch import nn

from craftai_dev.bare_import import bare_package

DIS_MODULE = "dis_inference.models.isnet"
ANIME_MODULE = "anime_seg.remove_bg.isnet"


def _network_module(module: str) -> types.ModuleType:
    if module not in sys.modules:
        top, middle, _name = module.split(".")
        if top in sys.modules:
            root = list(sys.modules[top].__path__)
        else:
            spec = importlib.util.find_spec(top)
            root = list(spec.submodule_search_locations or []) if spec else []
        if not root:
            raise ModuleNotFoundError(f"{top} is not installed (tools/install_references.sh installs it)")
        if top not in sys.modules:
            bare_package(top, root)
        if f"{top}.{middle}" not in sys.modules:
            bare_package(f"{top}.{middle}", [f"{root[0]}/{middle}"])
        importlib.import_module(module)
    return sys.modules[module]


def dis_class() -> type[nn.Module]:
    """The DIS authors' ISNetDIS (in_ch=3, out_ch=1 by default): ([six sigmoid maps], [six features])."""
    cls: type[nn.Module] = _network_module(DIS_MODULE).ISNetDIS
    return cls


def anime_class() -> type[nn.Module]:
    """SkyTNT's ISNetDIS: ([six logit maps], [six features]), pooled after the first convolution."""
    cls: type[nn.Module] = _network_module(ANIME_MODULE).ISNetDIS
    return cls
