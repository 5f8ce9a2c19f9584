"""The IS-Net references (Qin et al., "Highly Accurate Dichotomous Image Segmentation", ECCV 2022),
importable without their packages.

- `dis_class`: the DIS authors' ISNetDIS (xuebinqin/DIS `IS-Net/models/isnet.py`) as dis-inference
  ships it: the first convolution's output goes to stage 1 unpooled, each side output is returned
  with the sigmoid applied. rembg's isnet-general-use is this network.
- `anime_class`: SkyTNT's variant (SkyTNT/anime-segmentation `model/isnet.py`) as anime-seg ships it:
  the same network (its forward also max-pools the first convolution's output, a value nothing
  reads), whose side outputs are returned as logits (SkyTNT's export applies the sigmoid to the
  first: `AnimeSegmentation.forward`). rembg's isnet-anime is SkyTNT's `isnetis.onnx`.

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

import torch
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
    """SkyTNT's ISNetDIS: ([six logit maps], [six features])."""
    cls: type[nn.Module] = _network_module(ANIME_MODULE).ISNetDIS
    return cls


HEIGHTS = {1: 7, 2: 6, 3: 5, 4: 4, 5: 4, 6: 4}  # the RSU height of stage k and of its decoder twin


def _ours(prefix: str, block: str) -> str:
    """The reference's `stage3.rebnconv2d` -> craftai_models.isnet's `en_3.decoder.1.conv`."""
    stage, decoder = prefix.removeprefix("stage").removesuffix("d"), prefix.endswith("d")
    height = HEIGHTS[int(stage)]
    ours = f"{'de' if decoder else 'en'}_{stage}"
    name = block.removeprefix("rebnconv")
    if name == "in":
        return f"{ours}.conv_in.conv"
    if name.endswith("d"):
        return f"{ours}.decoder.{int(name[:-1]) - 1}.conv"
    return f"{ours}.bottom.conv" if int(name) == height else f"{ours}.encoder.{int(name) - 1}.conv"


def folded_state(reference: nn.Module, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The reference network's weights for craftai_models.isnet.IsNet, in `dtype`: every REBNCONV's
    BatchNorm (eval statistics) folded into its convolution (in float64), and the names mapped."""
    state = {k: v.detach().double() for k, v in reference.state_dict().items()}
    out: dict[str, torch.Tensor] = {
        "stem.weight": state["conv_in.weight"],
        "stem.bias": state["conv_in.bias"],
    }
    for k in range(1, 7):
        out[f"side_{k}.weight"], out[f"side_{k}.bias"] = state[f"side{k}.weight"], state[f"side{k}.bias"]
    for key, weight in state.items():
        if not key.endswith(".conv_s1.weight") or not key.startswith("stage"):
            continue
        prefix, block = key.split(".")[:2]
        base = f"{prefix}.{block}"
        bn = {name: state[f"{base}.bn_s1.{name}"] for name in ("weight", "bias", "running_mean", "running_var")}
        factor = bn["weight"] / torch.sqrt(bn["running_var"] + 1e-5)
        bias = state[f"{base}.conv_s1.bias"]
        target = _ours(prefix, block)
        out[f"{target}.weight"] = weight * factor[:, None, None, None]
        out[f"{target}.bias"] = (bias - bn["running_mean"]) * factor + bn["bias"]
    return {k: v.to(dtype) for k, v in out.items()}
