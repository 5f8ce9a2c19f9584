"""The reference BiRefNet network (nobg 0.3.1's `nobg/birefnet/modeling_birefnet.py`, on
transformers' SwinBackbone), importable without its package and without torchvision.

nobg is a test-only dependency, installed with --no-deps (tools/install_references.sh). Its package
`__init__` imports SAM 3 and the image processors (transformers' torchvision backend); the network
module itself needs torch, transformers' Swin, huggingface_hub's mixin and `torchvision.ops
.deform_conv2d`. So a bare parent package is registered (same directory, no code run), and, only
while the network module is imported, two stand-ins are put in `sys.modules` and taken out again:

- `torchvision.ops` with craftai_dev.deform_conv_reference's `deform_conv2d` (independent,
  slow, straight from the DCNv2 formula) where torchvision does not import (the CPU torch here);
  where it does (the GPU machine), the real one is used;
- `nobg.birefnet.image_processing_birefnet` where transformers' torchvision backend does not
  import: the network module only names the processor class (for `default_processor`).

`reference_from_origin` builds the network through nobg's own `from_origin` from a folder holding
`model.safetensors` in the original key layout, exactly as nobg reads a downloaded checkpoint.
nobg's network is the authors' code of today (ZhengPeng7/BiRefNet `models/birefnet.py`, which reads
the patches in the einops order); `use_patch_order(get_patches_batch)` gives it the split of the
code the lite weights were trained with (docs/MATTE.md, "Patch order").

`author_matte` is the authors' inference around such a network, for the pipeline's parity test:
their tutorial's and model card's torchvision transforms in, nobg's post-processing out.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from craftai_dev import deform_conv_reference
from craftai_dev.bare_import import bare_package
from craftai_models import imagenet

LITE = {"embed_dim": 96, "depths": [2, 2, 6, 2], "num_heads": [3, 6, 12, 24], "window_size": 7, "num_layers": 4}


def _ensure_image_processing() -> None:
    """nobg's image processor module, or a stand-in where transformers' torchvision backend does not import."""
    name = "nobg.birefnet.image_processing_birefnet"
    try:
        importlib.import_module(name)
    except ImportError:
        processing = types.ModuleType(name)

        class BiRefNetImageProcessor:  # only named by BiRefNet.default_processor, never run here
            def __init__(self, **_kwargs: Any) -> None:
                raise RuntimeError("nobg's image processor needs torchvision")

        processing.BiRefNetImageProcessor = BiRefNetImageProcessor  # type: ignore[attr-defined]
        sys.modules[name] = processing


def _is_torchvision(key: str) -> bool:
    return key == "torchvision" or key.startswith("torchvision.")


@contextlib.contextmanager
def _torchvision_set_aside(*, stand_ins_only: bool) -> Iterator[None]:
    """torchvision's modules out of sys.modules while the body runs (`stand_ins_only`: those without a
    spec, which another reference left there), then put back as they were. Modules left in place
    stay: a real torchvision imported twice registers its operators twice, which torch refuses."""
    set_aside = {
        key: module
        for key, module in sys.modules.items()
        if _is_torchvision(key) and not (stand_ins_only and getattr(module, "__spec__", None) is not None)
    }
    if not set_aside:
        yield
        return
    kept = {key for key in sys.modules if _is_torchvision(key)} - set(set_aside)
    for key in set_aside:
        del sys.modules[key]
    try:
        yield
    finally:  # what the body imported in their place goes; what was kept stays
        for key in [k for k in sys.modules if _is_torchvision(k) and k not in kept]:
            del sys.modules[key]
        sys.modules.update(set_aside)


@contextlib.contextmanager
def _torchvision_ops() -> Iterator[bool]:
    """Yields whether torchvision's deform_conv2d was stood in for; the stand-in is only in
    sys.modules while the body runs (transformers probes for torchvision by its spec elsewhere)."""
    try:
        real = importlib.import_module("torchvision.ops")
    except ImportError:
        pass
    else:  # a real torchvision, not another reference's stand-in (which has no spec)
        if getattr(sys.modules.get("torchvision"), "__spec__", None) is not None and hasattr(real, "deform_conv2d"):
            yield False
            return
    with _torchvision_set_aside(stand_ins_only=False):
        torchvision = types.ModuleType("torchvision")
        ops = types.ModuleType("torchvision.ops")
        ops.deform_conv2d = deform_conv_reference.deform_conv2d  # type: ignore[attr-defined]
        torchvision.ops = ops  # type: ignore[attr-defined]
        sys.modules["torchvision"], sys.modules["torchvision.ops"] = torchvision, ops
        yield True


def modeling() -> types.ModuleType:
    """nobg.birefnet.modeling_birefnet, imported once without the package __init__."""
    name = "nobg.birefnet.modeling_birefnet"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec("nobg")
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError("nobg is not installed (tools/install_references.sh installs it)")
    root = list(spec.submodule_search_locations)
    bare_package("nobg", root)
    bare_package("nobg.birefnet", [str(Path(root[0]) / "birefnet")])
    with _torchvision_set_aside(stand_ins_only=True):  # transformers probes torchvision by its spec
        importlib.import_module("transformers.models.swin.modeling_swin")
    _ensure_image_processing()
    with _torchvision_ops() as stood_in:
        module = importlib.import_module(name)
    module.DEFORM_CONV_STOOD_IN = stood_in  # type: ignore[attr-defined]
    return module


def deform_conv_is_stood_in() -> bool:
    return bool(modeling().DEFORM_CONV_STOOD_IN)


def lite_config() -> Any:
    return modeling().BiRefNetConfig(**LITE)


def reference_from_origin(folder: Path, *, swin_l: bool = False) -> nn.Module:
    """nobg's BiRefNet_lite (or, `swin_l`, its default: the Swin-L BiRefNet) through
    `BiRefNet.from_origin(folder)`, eval mode, CPU."""
    module = modeling()
    (folder / "config.json").write_text(json.dumps({} if swin_l else LITE))
    config = module.BiRefNetConfig() if swin_l else lite_config()
    model: nn.Module = module.BiRefNet.from_origin(str(folder), config=config)
    return model.eval()


def remap(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """nobg's own remapping of the original key layout (what from_origin applies)."""
    remapper: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] = modeling()._remap_legacy_state_dict
    return remapper(state)


def get_patches_batch(image: torch.Tensor, patch_ref: torch.Tensor) -> torch.Tensor:
    """The original code's split before ZhengPeng7/BiRefNet 5198d3f (the lite weights' revision),
    restated: columns of patch_ref's width, each cut into its height, the patches concatenated
    along the channels (nobg's `image2patches(image, patch_ref=...)` signature, so that it can
    stand in for it)."""
    size_h, size_w = patch_ref.shape[2:]
    batch = []
    for sample in image:
        patches = []
        for column in torch.split(sample, size_w, dim=-1):
            patches += [patch.unsqueeze(0) for patch in torch.split(column, size_h, dim=-2)]
        batch.append(torch.cat(patches, dim=1))
    return torch.cat(batch, dim=0)


def use_patch_order(split: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], None]:
    """Make nobg's decoder split the picture with `split(image, patch_ref)` instead of its own
    einops-order `image2patches`; returns the function that puts nobg's back."""
    module: Any = modeling()
    original = module.image2patches
    module.image2patches = split

    def restore() -> None:
        module.image2patches = original

    return restore


def author_matte(picture: npt.NDArray[np.uint8], network: nn.Module, size: int = 1024) -> npt.NDArray[np.float32]:
    """The matte of an (H, W, 3) uint8 picture as the authors' inference makes it with `network`
    (nobg's BiRefNet): in, their tutorial's and model card's transforms on the PIL picture,
    `Resize((size, size))` (torchvision hands a PIL picture to Pillow: bilinear, antialiased, on the
    8-bit picture, 8-bit out), `ToTensor` (/255), `Normalize` (ImageNet's); the network's logits, their
    sigmoid; out, nobg's `post_process_alpha_matting` (bilinear back to the picture's size,
    align_corners=False, no antialiasing, in float). (H, W) float32 in [0, 1].

    Pillow resizes in two 8-bit passes, the width first in every release through 12 (those of the
    authors' code); Pillow 13 takes the height first for some sizes. The width and the height are
    resized here in that order by two resizes of one axis each, which are those two passes
    whatever Pillow runs this."""
    modeling()  # registers nobg's bare package, through which its utils import
    post: Callable[..., list[torch.Tensor]] = importlib.import_module("nobg.utils").post_process_alpha_matting
    height = picture.shape[0]
    wide = Image.fromarray(picture).resize((size, height), Image.Resampling.BILINEAR)
    squashed = wide.resize((size, size), Image.Resampling.BILINEAR)
    x = torch.from_numpy(np.asarray(squashed, dtype=np.uint8).copy()).permute(2, 0, 1).float().div(255)
    mean = torch.tensor(imagenet.MEAN).view(3, 1, 1)
    std = torch.tensor(imagenet.STD).view(3, 1, 1)
    with torch.no_grad():
        out = network(((x - mean) / std)[None])
        (alpha,) = post(out, [picture.shape[:2]])
    matte: npt.NDArray[np.float32] = alpha.float().numpy()
    return matte


def author_dynamic_matte(picture: npt.NDArray[np.uint8], network: nn.Module) -> npt.NDArray[np.uint8]:
    """The matte of an (H, W, 3) uint8 picture as the authors' inference at the original resolution
    makes it (ZhengPeng7/BiRefNet `inference.py` with `--resolution None`, which BiRefNet_dynamic is
    for), restated: their loader's RGB picture as a PIL image; `dataset.py`'s test path floors each
    side to a multiple of 32 and, where that changes the size, `image.resize(size)` (Pillow's default
    filter); `ToTensor` (/255) and `Normalize` (ImageNet's); the network's last logits (`network` as
    nobg's, `{"logits": ...}`, or a module returning the logits), their sigmoid in float32; bilinear
    back to the picture's size with `align_corners=True`; `save_tensor_img`'s `ToPILImage`, which
    writes `mul(255).byte()`. (H, W) uint8."""
    image = Image.fromarray(picture)
    floored = (image.width // 32 * 32, image.height // 32 * 32)
    if image.size != floored:
        image = image.resize(floored)
    x = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float().div(255)
    mean = torch.tensor(imagenet.MEAN).view(3, 1, 1)
    std = torch.tensor(imagenet.STD).view(3, 1, 1)
    with torch.no_grad():
        out = network(((x - mean) / std)[None])
    logits = out["logits"] if isinstance(out, dict) else out
    predicted = logits.sigmoid().to(torch.float32)
    alpha = F.interpolate(predicted, size=picture.shape[:2], mode="bilinear", align_corners=True)
    matte: npt.NDArray[np.uint8] = alpha[0, 0].mul(255).byte().numpy()
    return matte


class OnnxLogits(nn.Module):
    """An ONNX graph of BiRefNet's contract (one picture in, its logits first out) answering as nobg's
    network does (`{"logits": ...}`), for `author_matte`."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        from craftai_models.onnx_sessions import open_session

        self.session = open_session(path.read_bytes(), "cpu")
        self.input_name = self.session.get_inputs()[0].name

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        (logits, *_rest) = self.session.run(None, {self.input_name: x.numpy().astype(np.float32)})
        return {"logits": torch.from_numpy(logits)}
