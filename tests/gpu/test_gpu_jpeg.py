"""JPEG pictures decoded on the GPU for routes there (craftai_infer.engines.nvjpeg, CRAFTAI_GPU_JPEG):
the pixels are libjpeg-turbo's within a few levels, turned as the EXIF orientation says, and the
route uses them where they are; what nvJPEG cannot or must not decode goes to the CPU's strict
decoder. GPU only (run with `bash tools/gpu/run_tests.sh`); the service's
way, a turned JPEG on the torch route against the onnxruntime one, is in test_cuda_routes.py."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from craftai_common.errors import ServiceError
from craftai_dev import segment
from craftai_infer import pictures
from craftai_infer.engines import nvjpeg
from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines.picture import device_pixels

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
LIMITS = pictures.Limits(50_000_000, 16_384)
# largest and mean absolute difference to libjpeg-turbo's pixels (nvJPEG's inverse DCT and chroma
# upsampling are its own; measured 15-30 / 0.12-0.36 on the astronaut photo: tools/gpu/jpeg_decode.py)
MAX_DIFF, MEAN_DIFF = 48, 1.0


def jpeg(picture: Image.Image, orientation: int = 1, **options: object) -> bytes:
    out = io.BytesIO()
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    picture.save(out, format="JPEG", exif=exif.tobytes(), **options)
    return out.getvalue()


def _kinds(photos: dict[str, Path]) -> dict[str, bytes]:
    rgb = Image.open(photos["astronaut.png"]).convert("RGB").resize((640, 480))
    return {
        "4:2:0": jpeg(rgb, quality=92),
        "4:4:4": jpeg(rgb, quality=95, subsampling=0),
        "grey": jpeg(rgb.convert("L"), quality=90),
        "progressive": jpeg(rgb, quality=90, progressive=True),
        "orientation 6": jpeg(rgb, 6, quality=92),
        "orientation 3": jpeg(rgb, 3, quality=92),
        "orientation 5": jpeg(rgb, 5, quality=92),
    }


def test_jpegs_decoded_on_the_gpu_are_libjpeg_s_within_a_few_levels(photos: dict[str, Path]) -> None:
    on_gpu = nvjpeg.decoder("cuda")
    assert on_gpu is not None, "torchvision's nvJPEG decoder does not import on this GPU machine"
    device = torch.device("cuda")
    staging = HostStaging(device)
    for kind, data in _kinds(photos).items():
        cpu = pictures.decode(data, LIMITS)
        gpu = pictures.decode(data, LIMITS, on_gpu=on_gpu)
        assert gpu.shape == cpu.shape, kind  # turned as the CPU turns it (a transposition changes the shape)
        on_device = device_pixels(gpu, device)
        diff = np.abs(gpu.astype(np.int16) - cpu.astype(np.int16))
        print(f"{kind}: {'GPU' if on_device is not None else 'CPU'}, max {diff.max()}, mean {diff.mean():.3f}")
        if kind == "progressive" and on_device is None:
            assert np.array_equal(gpu, cpu)  # nvJPEG left it to the CPU
            continue
        assert on_device is not None, kind
        assert np.array_equal(on_device.cpu().numpy(), gpu), kind  # the host pixels are the device's
        assert staging.upload(gpu) is on_device  # the route takes them where they are
        assert diff.max() <= MAX_DIFF and diff.mean() <= MEAN_DIFF, (kind, diff.max(), diff.mean())


def test_what_the_gpu_must_not_decode_goes_to_the_cpu(photos: dict[str, Path]) -> None:
    on_gpu = nvjpeg.decoder("cuda")
    assert on_gpu is not None
    rgb = Image.open(photos["chelsea.png"]).convert("RGB")
    cmyk = jpeg(rgb.convert("CMYK"), quality=90)
    got = pictures.decode(cmyk, LIMITS, on_gpu=on_gpu)
    assert device_pixels(got, torch.device("cuda")) is None and np.array_equal(got, pictures.decode(cmyk, LIMITS))
    whole = jpeg(rgb, quality=90)
    with pytest.raises(ServiceError) as refused:  # no end marker: the CPU's refusal, in its words
        pictures.decode(whole[: len(whole) // 2], LIMITS, on_gpu=on_gpu)
    assert refused.value.reason == "BAD_PICTURE"
    png = segment.png(rgb)
    assert device_pixels(pictures.decode(png, LIMITS, on_gpu=on_gpu), torch.device("cuda")) is None
