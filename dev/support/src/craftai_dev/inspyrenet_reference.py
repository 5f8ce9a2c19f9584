"""The reference InSPyReNet network (transparent-background 1.3.4), importable without its package.

transparent-background is a test-only dependency, installed with --no-deps (tools/install_references.sh).
Its package `__init__` imports `Remover` and the GUI (torchvision, albumentations, wget, gdown, easydict,
flet...), none of which the network needs, and PyPI's torchvision does not import beside this
machine's CPU torch. So, instead of running that `__init__`, a bare parent package is registered in
`sys.modules` (same directory, no code run) and the network modules are imported from it unchanged.
The same trick gives `timm.layers` without timm's `__init__` (which imports torchvision): the three
names the reference's Swin uses (DropPath, to_2tuple, trunc_normal_) come from timm's own files.
Where timm imports cleanly (the GPU machine has torchvision), the real package is used as is.

`kornia.morphology` is only used by `Transition`, i.e. by the LR/HR blending branch that
`threshold=None` never takes; when kornia is absent (the GPU machine), `allow_missing_kornia=True`
registers a stand-in whose functions raise if they are ever called.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from craftai_dev import calibration
from craftai_dev.bare_import import bare_package


def _package_path(name: str, wheel: Path | None) -> list[str]:
    if wheel is not None:
        if not zipfile.is_zipfile(wheel):
            raise FileNotFoundError(f"{wheel} is not a wheel")
        return [str(wheel / name)]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"{name} is not installed (tools/install_references.sh installs it)")
    return list(spec.submodule_search_locations)


def _ensure_timm_layers() -> None:
    try:
        importlib.import_module("timm.layers")
        return
    except ImportError:
        for key in [k for k in sys.modules if k == "timm" or k.startswith("timm.")]:
            del sys.modules[key]
    bare_package("timm", _package_path("timm", None))
    layers = bare_package("timm.layers", [str(Path(sys.modules["timm"].__path__[0]) / "layers")])
    drop = importlib.import_module("timm.layers.drop")
    helpers = importlib.import_module("timm.layers.helpers")
    weight_init = importlib.import_module("timm.layers.weight_init")
    layers.DropPath = drop.DropPath  # type: ignore[attr-defined]
    layers.to_2tuple = helpers.to_2tuple  # type: ignore[attr-defined]
    layers.trunc_normal_ = weight_init.trunc_normal_  # type: ignore[attr-defined]


def _ensure_kornia_morphology(allow_missing: bool) -> None:
    try:
        importlib.import_module("kornia.morphology")
    except ImportError:
        if not allow_missing:
            raise

        def unavailable(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("kornia is not installed: Transition (LR/HR blending) cannot run")

        kornia = types.ModuleType("kornia")
        morphology = types.ModuleType("kornia.morphology")
        morphology.dilation = unavailable  # type: ignore[attr-defined]
        morphology.erosion = unavailable  # type: ignore[attr-defined]
        kornia.morphology = morphology  # type: ignore[attr-defined]
        sys.modules["kornia"] = kornia
        sys.modules["kornia.morphology"] = morphology


def reference_factory(wheel: Path | None = None, allow_missing_kornia: bool = False) -> Callable[..., nn.Module]:
    """transparent_background.InSPyReNet.InSPyReNet_SwinB, imported without the package __init__.

    `wheel`: import from a transparent_background wheel file instead of site-packages (zipimport).
    """
    _ensure_timm_layers()
    _ensure_kornia_morphology(allow_missing_kornia)
    if "transparent_background" not in sys.modules or wheel is not None:
        if wheel is not None and str(wheel) not in sys.path:
            sys.path.insert(0, str(wheel))
        bare_package("transparent_background", _package_path("transparent_background", wheel))
    module = importlib.import_module("transparent_background.InSPyReNet")
    factory: Callable[..., nn.Module] = module.InSPyReNet_SwinB
    return factory


def build_reference(base_size: tuple[int, int], **kwargs: Any) -> nn.Module:
    """The reference network as transparent-background builds it (threshold=None), eval mode, CPU."""
    factory = reference_factory(**kwargs)
    model = factory(64, False, list(base_size), threshold=None)
    return model.eval()


def randomised_state_dict(reference: nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every parameter and buffer replaced by random values that keep the network numerically sane.

    A fresh reference leaves the attention gammas at 0 (attention branches would be untested), BN
    statistics at 0/1 and SICA thresholds at 0.5; the relative position indices are randomised too
    (within the table) so that both networks are shown to read them from the file.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: torch.Size, std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std + mean

    def uniform(shape: torch.Size, lo: float, hi: float) -> torch.Tensor:
        return torch.rand(shape, generator=gen) * (hi - lo) + lo

    state: dict[str, torch.Tensor] = {}
    for key, value in reference.state_dict().items():
        shape = value.shape
        if key.endswith("relative_position_index"):
            table = reference.get_parameter(key.replace("relative_position_index", "relative_position_bias_table"))
            state[key] = torch.randint(0, table.shape[0], shape, generator=gen, dtype=torch.int64)
        elif key.endswith("num_batches_tracked"):
            state[key] = torch.randint(0, 10_000, shape, generator=gen, dtype=torch.int64)
        elif key.endswith("running_mean"):
            state[key] = normal(shape, 0.2)
        elif key.endswith("running_var"):
            state[key] = uniform(shape, 0.5, 2.0)
        elif key.endswith(("threshold", "lthreshold")):
            state[key] = uniform(shape, 0.3, 0.7)
        elif key.endswith("gamma") or key.endswith("relative_position_bias_table"):
            state[key] = normal(shape, 0.5)
        elif value.dim() == 1 and key.endswith("weight"):  # LayerNorm / BatchNorm scale
            state[key] = normal(shape, 0.2, 1.0)
        elif value.dim() == 1:  # biases
            state[key] = normal(shape, 0.1)
        else:  # linear and conv weights: unit-variance outputs for unit-variance inputs
            fan_in = value[0].numel()
            state[key] = normal(shape, 1.0 / fan_in**0.5)
        assert state[key].dtype == value.dtype, key
    return state


def calibrate_batchnorm(model: nn.Module, x: torch.Tensor, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every BatchNorm's running statistics set to those of one forward pass of `x`, then the state
    dict (with `num_batches_tracked` randomised again; craftai_dev.calibration says why)."""
    return calibration.calibrate_batchnorm(model, lambda: model.forward_inspyre(x), seed=seed)  # type: ignore[operator]
