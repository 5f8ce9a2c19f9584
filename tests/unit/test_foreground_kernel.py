"""The foreground estimation's GPU kernel (craftai_infer.pipelines.foreground_kernel: a level's
wavefront steps in one Triton launch) computes what the host-launched steps compute, run here by
Triton's interpreter on the CPU (TRITON_INTERPRET=1: the same kernel source, one block; set before
Triton is imported, so in a process of its own).

The pictures: three photos of different kinds (fur, hair, hard edges) reduced to a few dozen pixels
(the interpreter runs a kernel's every operation in Python), in both orientations of the layout
(wider and taller), each with a soft matte whose partial band covers many pixels. The bound: float32
rounding (1e-5), and no 8-bit colour of the cutout apart. The compiled kernel on CUDA, with its
blocks waiting for each other between steps, is checked against pymatting and against one block by
tests/gpu/test_matte_outputs_gpu.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_infer.pipelines import foreground_kernel
from craftai_infer.pipelines.foreground import estimate_foreground

ROUNDING = 1e-5


def _picture_and_matte(path: Path, size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    width, height = size
    picture = np.asarray(Image.open(path).convert("RGB").resize(size, Image.Resampling.BOX))
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    radius = np.hypot((xx - width / 2) / width, (yy - height / 2) / height)
    matte = np.clip((0.4 - radius) / 0.25, 0.0, 1.0)  # a wide band of partial alpha
    image = torch.from_numpy(picture.copy()).permute(2, 0, 1)[None]
    alpha = torch.from_numpy((matte * 255).round().astype(np.uint8))[None, None]
    return image, alpha


LAUNCHED = """
import sys, torch
from craftai_infer.pipelines import foreground_kernel
from craftai_infer.pipelines.foreground import estimate_foreground
assert foreground_kernel.runs_on(torch.device("cpu"))
torch.save([estimate_foreground(image, alpha) for image, alpha in torch.load(sys.argv[1])], sys.argv[2])
assert foreground_kernel.broken() is None, foreground_kernel.broken()  # the kernel ran
"""
CASES = {"chelsea.png": (48, 32), "astronaut.png": (30, 41), "coffee.png": (40, 27)}


@pytest.fixture(scope="module")
def launched(photos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """Every case's estimate by the kernel under the interpreter, in one process (its imports once)."""
    folder = tmp_path_factory.mktemp("kernel")
    torch.save([_picture_and_matte(photos[name], size) for name, size in CASES.items()], folder / "inputs.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    subprocess.run(
        [sys.executable, "-c", LAUNCHED, str(folder / "inputs.pt"), str(folder / "launched.pt")],
        env=env, check=True, timeout=600,
    )  # fmt: skip
    return dict(zip(CASES, torch.load(folder / "launched.pt"), strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_the_kernel_computes_the_host_launched_steps(
    photos: dict[str, Path], launched: dict[str, torch.Tensor], name: str
) -> None:
    image, alpha = _picture_and_matte(photos[name], CASES[name])
    assert not foreground_kernel.runs_on(torch.device("cpu"))
    stepped = estimate_foreground(image, alpha)
    kernel = launched[name]

    assert kernel.shape == stepped.shape
    assert torch.isfinite(kernel).all()
    partial = ((alpha > 0) & (alpha < 255)).expand_as(stepped)
    assert partial.float().mean() > 0.3  # the comparison covers many partial pixels
    assert stepped[partial].std() > 0.05  # and colours that are not flat
    assert (kernel - stepped).abs().max() <= ROUNDING
    levels = (torch.floor(kernel * 255 + 0.5) - torch.floor(stepped * 255 + 0.5)).abs()
    assert levels.max() == 0


def test_a_kernel_that_does_not_build_leaves_the_level_to_the_host_launched_steps(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton present but the kernel refused by its compiler (another Triton, another GPU): the
    level is left untouched for the steps, said once in the log, and no later level tries again."""

    def refused() -> object:
        raise RuntimeError("no such intrinsic on this GPU")

    monkeypatch.setattr(foreground_kernel, "_kernel", refused)
    monkeypatch.setattr(foreground_kernel, "_broken", [])
    monkeypatch.setattr(foreground_kernel, "_interpreted", lambda: True)  # one block, no CUDA asked
    state = torch.rand(2, 40, 6)
    before = state.clone()
    ran = foreground_kernel.run_level(
        state, torch.rand(2, 40, 1), torch.rand(2, 40, 1), torch.rand(2, 40, 3), torch.rand(2, 40, 6),
        rows=4, first=8, steps=6, block=8,
    )  # fmt: skip
    assert not ran and torch.equal(state, before)
    assert foreground_kernel.broken() == "RuntimeError: no such intrinsic on this GPU"
    assert "the foreground kernel did not build" in caplog.text
    assert not foreground_kernel.runs_on(torch.device("cpu"))
