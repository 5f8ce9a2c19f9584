"""Device choice: the GPU when one answers, else the CPU; CRAFTAI_DEVICE=cpu forces the CPU."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger("craftai.infer.device")


@dataclass(frozen=True)
class DeviceInfo:
    gpu_available: bool
    gpu_name: str
    preferred: str  # "cuda:0" or "cpu"


def _nvidia_device_present() -> bool:
    """Without an NVIDIA device node no GPU can answer: skip importing torch (seconds) to find out."""
    return any(Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl", "/proc/driver/nvidia/version"))


def _torch_gpu() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, ""
    try:
        if torch.cuda.is_available():
            _strict_fp32(torch)
            return True, str(torch.cuda.get_device_name(0))
    except Exception as exc:
        log.warning("CUDA did not answer: %s", exc)
    return False, ""


def _strict_fp32(torch: Any) -> None:
    """fp32 means fp32 on the GPU: torch lets cuDNN convolutions run in TF32 by default, which moved
    u2netp's matte by up to 23/255 from the onnxruntime route's (tests/gpu). Each route asks for
    reduced precision explicitly, with autocast (CRAFTAI_GPU_PRECISION)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):  # the per-backend switch of newer torch
        conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


def _onnxruntime_gpu() -> bool:
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def detect(setting: Literal["auto", "cpu", "cuda"]) -> DeviceInfo:
    if setting == "cpu" or not _nvidia_device_present():
        if setting == "cuda":
            log.warning("CRAFTAI_DEVICE=cuda but no NVIDIA device is present; using the CPU")
        return DeviceInfo(False, "", "cpu")
    gpu, name = _torch_gpu()
    if not gpu and _onnxruntime_gpu():
        gpu, name = True, "CUDA (onnxruntime)"
    if setting == "cuda" and not gpu:
        log.warning("CRAFTAI_DEVICE=cuda but no GPU answers; using the CPU")
    return DeviceInfo(gpu, name, "cuda:0" if gpu else "cpu")
