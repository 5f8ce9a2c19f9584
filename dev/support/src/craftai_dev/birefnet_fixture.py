"""A calibrated random BiRefNet_lite checkpoint in the original key layout (the real one cannot be
had here), its crafted variants for the refusal tests, and the network exported to ONNX with the
published contract; all cached under <repo>/.cache/fixtures/.

Calibration, so that the matte is not one value (a random network saturates): every weight is
drawn with a standard deviation of 1/√fan_in (unit-variance outputs for unit-variance inputs),
offsets of the deformable convolutions a few pixels, and every BatchNorm's statistics are then
measured on a real photo (scikit-image's astronaut) through the network itself (but the
image-level ASPP branch's, which sees one value per picture), so each stage
stays O(1) and the final logits spread around 0 (checked by the tests: the matte varies across
the picture, with a subject-sized share above 0.5).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from craftai_common.store import FilePin
from craftai_dev import calibration
from craftai_dev.cache import CACHE
from craftai_dev.files import sample_photo, sha256_of
from craftai_models import imagenet
from craftai_models.birefnet import (
    PREPARED_SETTINGS,
    PREPARED_WEIGHTS,
    TRAINED_ORDER,
    Architecture,
    BiRefNet,
    GlobalPool,
    PatchOrder,
    birefnet_lite,
    birefnet_swin_l,
    write_prepared,
)
from craftai_models.swin import relative_position_index

SEED = 16
CALIBRATION_SIDE = 512
# What the published file's header carries (safetensors as saved by huggingface_hub / transformers).
METADATA = {"format": "pt"}
# The published ONNX contract (BiRefNet's tutorials/BiRefNet_pth2onnx.ipynb; docs/research/weights.md).
ONNX_INPUT, ONNX_OUTPUT, ONNX_OPSET = "input_image", "output_image", 17


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    pin: FilePin


def photo_input(side: int, name: str = "astronaut.png") -> Tensor:
    """A real photo squashed to side×side (antialiased bilinear), ImageNet-normalised: (1, 3, side, side)."""
    rgb = np.asarray(Image.open(sample_photo(name)).convert("RGB"), dtype=np.float32) / 255.0
    x = torch.from_numpy(rgb).permute(2, 0, 1)[None]
    x = F.interpolate(x, size=(side, side), mode="bilinear", antialias=True, align_corners=False)
    mean = torch.tensor(imagenet.MEAN).view(1, 3, 1, 1)
    std = torch.tensor(imagenet.STD).view(1, 3, 1, 1)
    return (x - mean) / std


def randomised_state_dict(model: nn.Module, seed: int = SEED) -> dict[str, Tensor]:
    """Every parameter and buffer random (BatchNorm statistics too), the relative position indices
    excepted: they are what the published file holds (the standard index), and nobg rebuilds
    them rather than reading them, so a random one would only test nobg's loader away."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: torch.Size, std: float, mean: float = 0.0) -> Tensor:
        return torch.randn(shape, generator=gen) * std + mean

    state: dict[str, Tensor] = {}
    for key, value in model.state_dict().items():
        shape = value.shape
        if key.endswith("relative_position_index"):  # (window², window²)
            state[key] = relative_position_index(round(shape[0] ** 0.5))
        elif key.endswith("num_batches_tracked"):
            state[key] = torch.randint(0, 10_000, shape, generator=gen, dtype=torch.int64)
        elif key.endswith("running_mean"):
            state[key] = normal(shape, 0.2)
        elif key.endswith("running_var"):
            state[key] = torch.rand(shape, generator=gen) * 1.5 + 0.5
        elif key.endswith("relative_position_bias_table"):
            state[key] = normal(shape, 0.5)
        elif value.dim() == 1 and key.endswith("weight"):  # LayerNorm / BatchNorm scale
            state[key] = normal(shape, 0.2, 1.0)
        elif ".offset_conv." in key:  # offsets of a few pixels: the taps really move
            fan_in = value[0].numel() if value.dim() > 1 else 1
            state[key] = normal(shape, 2.0 / fan_in**0.5 if value.dim() > 1 else 0.5)
        elif value.dim() == 1:  # biases
            state[key] = normal(shape, 0.1)
        else:  # linear and conv weights: unit-variance outputs for unit-variance inputs
            state[key] = normal(shape, 1.0 / value[0].numel() ** 0.5)
        assert state[key].dtype == value.dtype and state[key].shape == shape, key
    return state


def calibrate_batchnorm(model: BiRefNet, x: Tensor, seed: int = SEED) -> dict[str, Tensor]:
    """Every BatchNorm's running statistics set to those of one forward pass of `x`, but the
    image-level ASPP branch's (one value per channel and picture: it keeps its random statistics)."""
    pooled = [m[2] for m in model.modules() if isinstance(m, GlobalPool)]
    return calibration.calibrate_batchnorm(model, lambda: model(x), skip=pooled, seed=seed)


def random_network(seed: int = SEED, order: PatchOrder = TRAINED_ORDER) -> BiRefNet:
    """The network with `randomised_state_dict` (built on the meta device: no initialisation to pay for)."""
    with torch.device("meta"):
        model = birefnet_lite(order)
    model.load_state_dict(randomised_state_dict(model, seed), strict=True, assign=True)
    return model.eval()


def calibrated_state(seed: int = SEED, order: PatchOrder = TRAINED_ORDER) -> dict[str, Tensor]:
    return calibrate_batchnorm(random_network(seed, order), photo_input(CALIBRATION_SIDE), seed)


def _folder() -> Path:
    return CACHE / "fixtures" / f"birefnet-lite-random-{SEED}"


def _partial(path: Path) -> Path:
    """A partial file of this process's own: two test workers may make the same fixture at once (each
    renames its own whole file into place; the files are the same)."""
    return path.with_name(f".{path.name}.{os.getpid()}.part")


def _pinned(path: Path, folder: str, name: str) -> Checkpoint:
    return Checkpoint(path, FilePin(folder, name, path.stat().st_size, sha256_of(path)))


def _save(path: Path, state: dict[str, Tensor]) -> Checkpoint:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = _partial(path)
        save_file({k: v.contiguous() for k, v in state.items()}, str(partial), metadata=METADATA)
        partial.replace(path)
    return _pinned(path, "birefnet-lite", "model.safetensors")


def calibrated_for(photo: str, seed: int = SEED) -> Checkpoint:
    """The random checkpoint calibrated on `photo` (a sample photo's name), cached: its BatchNorm
    statistics measured on that photo, then its readout (`decoder.conv_out1`, the final logit) fitted
    by least squares to ±12 logits of the real u2netp's matte of the same photo
    (craftai_dev.calibration, as the InSPyReNet fixture's), so that its matte there has a subject,
    a background and edges between them rather than one saturated value or a speckle (a comparison
    of two pipelines on either proves little)."""
    path = _folder() / f"calibrated-{Path(photo).stem}.safetensors"
    if path.exists():
        return _pinned(path, "birefnet-lite", "model.safetensors")
    x = photo_input(CALIBRATION_SIDE, photo)
    network = random_network(seed)
    network.load_state_dict(calibrate_batchnorm(network, x, seed), strict=True, assign=True)
    readout = network.decoder.conv_out1[0]
    assert isinstance(readout, nn.Conv2d)
    features = calibration.readout_input(network, readout, lambda: network(x))
    calibration.fit_readout(readout, features, _u2netp_logits(photo, CALIBRATION_SIDE))
    return _save(path, {k: v.detach().clone() for k, v in network.state_dict().items()})


def _u2netp_logits(photo: str, side: int) -> Tensor:
    """±12 logits of the real u2netp's matte of `photo` squashed to side² (rembg's pipeline)."""
    from craftai_dev.files import u2netp_onnx
    from craftai_infer.pipelines import matte_u2netp
    from craftai_models.onnx_sessions import open_session

    rgb = np.asarray(Image.open(sample_photo(photo)).convert("RGB").resize((side, side), Image.Resampling.BICUBIC))
    session = open_session(u2netp_onnx(), "cpu")
    fused = session.run(None, {session.get_inputs()[0].name: matte_u2netp.preprocess(rgb)})[0]
    subject = matte_u2netp.postprocess(fused, (side, side)).astype(np.float32) / 255.0
    return torch.from_numpy(24.0 * (subject - 0.5))[None, None]


def checkpoints() -> dict[str, Checkpoint]:
    """ "random": the calibrated checkpoint; "missing-key", "extra-key", "wrong-shape": crafted from it."""
    folder = _folder()
    names = ("random", "missing-key", "extra-key", "wrong-shape")
    if all((folder / f"{n}.safetensors").exists() for n in names):
        return {n: _pinned(folder / f"{n}.safetensors", "birefnet-lite", "model.safetensors") for n in names}
    state = calibrated_state()
    made = {"random": _save(folder / "random.safetensors", state)}
    missing = dict(state)
    del missing["decoder.conv_out1.0.weight"]
    made["missing-key"] = _save(folder / "missing-key.safetensors", missing)
    made["extra-key"] = _save(folder / "extra-key.safetensors", {**state, "decoder.conv_out2.0.weight": torch.zeros(1)})
    wrong = dict(state)
    wrong["decoder.ipt_blk5.conv1.weight"] = torch.zeros(64, 768, 3, 3)
    made["wrong-shape"] = _save(folder / "wrong-shape.safetensors", wrong)
    return made


def swin_l_file(seed: int = SEED) -> Checkpoint:
    """A random Swin-L BiRefNet stored as the published Swin-L files are (floats in fp16, int64
    indices and counters, `{"format": "pt"}`: 444,473,596 bytes), cached: what a preparation reads
    strictly. Not calibrated: nothing here runs it on a CPU (a 2048² forward costs minutes)."""
    path = CACHE / "fixtures" / f"birefnet-swin-l-random-{seed}" / "model.safetensors"
    if not path.exists():
        with torch.device("meta"):
            network = birefnet_swin_l()
        state = randomised_state_dict(network, seed)
        _save(path, {k: v.half() if v.is_floating_point() else v for k, v in state.items()})
    return _pinned(path, "birefnet-hr", "model.safetensors")


def swin_l_prepared(
    folder: Path,
    device: torch.device | str,
    side: int,
    order: PatchOrder = PatchOrder.CHANNEL_MAJOR,
    photo: str = "astronaut.png",
    *,
    seed: int = 11,
) -> Path:
    """`folder` laid out as a Swin-L recipe's preparation lays it out (the checkpoint, `birefnet.json`),
    holding a random Swin-L network whose BatchNorms are calibrated on `photo` at `side`² on `device`
    (for the GPU: a forward at 2048² takes minutes on a CPU), stored in fp16 as the published files are."""
    with torch.device("meta"):
        network = birefnet_swin_l(order)
    network.load_state_dict(randomised_state_dict(network, seed=seed), strict=True, assign=True)
    state = calibrate_batchnorm(network.to(device).eval(), photo_input(side, photo).to(device))
    published = {k: (v.half() if v.is_floating_point() else v).cpu().contiguous() for k, v in state.items()}
    del network, state
    folder.mkdir(parents=True, exist_ok=True)
    save_file(published, str(folder / PREPARED_WEIGHTS), metadata=METADATA)
    write_prepared(folder / PREPARED_SETTINGS, order, Architecture.SWIN_L, side)
    return folder


def export_onnx(network: BiRefNet, path: Path, side: int = 1024) -> Path:
    """`network` as a one-file ONNX graph with the published contract: input `input_image`
    f32[1,3,side,side], one output `output_image` f32[1,1,side,side] (logits), opset 17."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial(path)
    with torch.no_grad():
        torch.onnx.export(
            network.eval(),
            (torch.zeros(1, 3, side, side),),
            str(partial),
            input_names=[ONNX_INPUT],
            output_names=[ONNX_OUTPUT],
            opset_version=ONNX_OPSET,
            dynamo=False,  # the TorchScript exporter, as BiRefNet's notebook (one file, no external data)
        )
    partial.replace(path)
    return path


def onnx_file(side: int = 1024, order: PatchOrder = TRAINED_ORDER) -> Checkpoint:
    """The calibrated checkpoint's network exported with the published contract, reading the
    patches in `order`: in the trained order it is the checkpoint's own graph (as the published ONNX
    is the lite checkpoint's); in the other, the graph of a checkpoint trained with that order
    whose weights are these, against which the checkpoint's preparation must refuse the recipe's order."""
    suffix = "" if order is TRAINED_ORDER else f"-{order.value}"
    path = _folder() / f"birefnet-{side}{suffix}.onnx"
    if not path.exists():
        network = birefnet_lite(order).eval()
        network.load_state_dict(load_file(str(checkpoints()["random"].path)), strict=True)
        export_onnx(network, path, side)
    return _pinned(path, "birefnet-lite", "BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx")


def prepared_folder(
    checkpoint: Checkpoint, order: PatchOrder = TRAINED_ORDER, architecture: Architecture = Architecture.LITE
) -> Path:
    """A folder laid out as the torch route's preparation lays it out (the checkpoint, linked, and
    how it is read: its order and configuration), for building the route outside the services
    (tools, benchmarks)."""
    named = "" if architecture is Architecture.LITE else f"-{architecture.value}"
    folder = _folder() / f"prepared-{checkpoint.path.parent.name}-{checkpoint.path.stem}{named}-{order.value}"
    if not (folder / PREPARED_SETTINGS).exists():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another worker made it
            (folder / PREPARED_WEIGHTS).symlink_to(checkpoint.path)
        partial = _partial(folder / PREPARED_SETTINGS)
        write_prepared(partial, order, architecture)
        partial.replace(folder / PREPARED_SETTINGS)
    return folder
