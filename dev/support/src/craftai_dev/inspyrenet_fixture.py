"""A randomised InSPyReNet Swin-B checkpoint with the published key names (the real one cannot be
had here), and crafted variants for the refusal tests; cached under <repo>/.cache/fixtures/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from craftai_common.store import FilePin
from craftai_dev.cache import CACHE, exclusive
from craftai_dev.files import sha256_of
from craftai_dev.inspyrenet_reference import randomised_state_dict
from craftai_models.inspyrenet import inspyrenet_swin_b

SEED = 7


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    pin: FilePin


def _pinned(path: Path) -> Checkpoint:
    return Checkpoint(path, FilePin("inspyrenet-swinb", "inspyrenet.safetensors", path.stat().st_size, sha256_of(path)))


def _save(path: Path, state: dict[str, torch.Tensor]) -> Checkpoint:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        save_file({k: v.contiguous() for k, v in state.items()}, str(partial))
        partial.replace(path)
    return _pinned(path)


def checkpoints() -> dict[str, Checkpoint]:
    """ "random": every tensor randomised; "missing-key", "extra-key", "wrong-shape": crafted from it."""
    folder = CACHE / "fixtures" / f"inspyrenet-random-{SEED}"
    names = ("random", "missing-key", "extra-key", "wrong-shape")
    if all((folder / f"{n}.safetensors").exists() for n in names):
        return {n: _pinned(folder / f"{n}.safetensors") for n in names}
    with exclusive(folder.name):
        if all((folder / f"{n}.safetensors").exists() for n in names):  # made while this one waited
            return {n: _pinned(folder / f"{n}.safetensors") for n in names}
        state = randomised_state_dict(inspyrenet_swin_b(), seed=SEED)
        made = {"random": _save(folder / "random.safetensors", state)}
        missing = dict(state)
        del missing["decoder.conv5.conv.weight"]
        made["missing-key"] = _save(folder / "missing-key.safetensors", missing)
        extra = {**state, "decoder.conv6.conv.weight": torch.zeros(1)}
        made["extra-key"] = _save(folder / "extra-key.safetensors", extra)
        wrong = dict(state)
        wrong["attention0.threshold"] = torch.zeros(2)
        made["wrong-shape"] = _save(folder / "wrong-shape.safetensors", wrong)
    return made


CALIBRATION_PHOTO = "astronaut.png"


def calibrated(side: int = 384, device: str = "cpu") -> Checkpoint:
    """The random checkpoint calibrated on a real photo (craftai_dev.calibration), so that its
    matte has a subject, a background and edges between them: the refinement then filters a real
    share of a large picture's tiles. Calibrated with the photo at `side`² (the bench uses 1280², the
    network's input for a large picture, on the GPU; CI a small side on the CPU); cached per side."""
    folder = CACHE / "fixtures" / f"inspyrenet-calibrated-{SEED}-{side}"
    path = folder / "calibrated.safetensors"
    if path.exists():
        return _pinned(path)
    with exclusive(folder.name):
        if path.exists():
            return _pinned(path)
        return _save(path, calibrated_state(side, device))


def calibrated_state(side: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Two BatchNorm calibrations on the photo around a least-squares fit of the decoder's readout
    (the /8 saliency logit) to ±12 logits of the real u2netp's matte of the same photo; the three
    Laplacian readouts (SICA conv_out4) scaled down to small residuals, as a trained network's are."""
    import numpy as np
    from PIL import Image

    from craftai_dev import calibration
    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp
    from craftai_infer.pipelines.matte_inspyrenet import network_input
    from craftai_models.onnx_sessions import open_session

    if side % 32 or side > 1280:
        raise ValueError("the calibration side is a multiple of 32, at most 1280 (the network's largest input)")
    rgb = np.asarray(
        Image.open(photos()[CALIBRATION_PHOTO]).convert("RGB").resize((side, side), Image.Resampling.BICUBIC)
    )
    u2netp = open_session(u2netp_onnx(), "cpu")
    fused = u2netp.run(None, {u2netp.get_inputs()[0].name: matte_u2netp.preprocess(rgb)})[0]
    subject = matte_u2netp.postprocess(fused, (side // 8, side // 8)).astype(np.float32) / 255.0
    target = torch.from_numpy(24.0 * (subject - 0.5))[None, None]
    target -= target.mean()  # the readout has no bias

    net = inspyrenet_swin_b()
    net.load_state_dict(randomised_state_dict(net, seed=SEED))
    net.to(device).eval()
    x = network_input(rgb, torch.device(device)).x

    def forward() -> object:
        return net(x)

    calibration.calibrate_batchnorm(net, forward)
    readout = net.decoder.conv5.conv
    calibration.fit_readout(readout, calibration.readout_input(net, readout, forward), target.to(device))
    with torch.no_grad():
        for sica in (net.attention2, net.attention1, net.attention0):
            bn = sica.conv_out4.bn
            assert bn is not None
            bn.weight.mul_(0.1)
            bn.bias.zero_()
    return {k: v.cpu() for k, v in calibration.calibrate_batchnorm(net, forward, seed=SEED).items()}
