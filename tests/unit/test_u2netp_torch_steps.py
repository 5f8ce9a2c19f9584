"""routes/u2netp_torch.py with rembg's steps on the route's device (pipelines/matte_u2netp_torch.py):
the route's mattes equal those of its host path (Pillow's resizes) byte for byte, on the CPU here
(on a GPU `warm_up` turns them on after checking them there: tests/gpu/test_pillow_lanczos_cuda.py);
on the CPU the route keeps the host path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from craftai_infer.engines.staging import HostStaging
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_torch import U2netpTorch
from craftai_models.u2netp import WEIGHTS


@pytest.fixture(scope="module")
def route(u2netp_converted: dict[str, torch.Tensor], tmp_path_factory: pytest.TempPathFactory) -> U2netpTorch:
    folder = tmp_path_factory.mktemp("u2netp-prepared")
    save_file(u2netp_converted, str(folder / WEIGHTS))
    return U2netpTorch(RouteFiles({}, folder, cpu_threads=2), "cpu")


def test_the_steps_on_the_device_give_the_host_paths_mattes(route: U2netpTorch, photos: dict[str, Path]) -> None:
    pictures = [
        np.asarray(Image.open(photos["chelsea.png"]).convert("RGB")),
        np.asarray(Image.open(photos["rocket.jpg"]).convert("RGBA")),  # alpha dropped on both paths
        np.asarray(Image.open(photos["astronaut.png"]).convert("RGB").resize((200, 333))),  # portrait
    ]
    messages: list[str] = []
    route.warm_up(messages.append)
    assert not route.steps_on_device and messages == []  # on the CPU: Pillow's, nothing checked
    on_host = route.matte(pictures)
    route.steps_on_device = True
    route._staging = route._staging or _cpu_staging()
    try:
        on_device = route.matte(pictures)
    finally:
        route.steps_on_device, route._staging = False, None
    for host, device, picture in zip(on_host, on_device, pictures, strict=True):
        assert isinstance(device, torch.Tensor) and isinstance(host, np.ndarray)
        assert device.shape == host.shape == picture.shape[:2]
        assert np.array_equal(device.numpy(), host)
    assert len({m.tobytes() for m in on_host if isinstance(m, np.ndarray)}) == 3  # the pictures' mattes differ


def _cpu_staging() -> HostStaging:
    return HostStaging(torch.device("cpu"))
