#!/usr/bin/env python3
"""u2netp on a GPU: the converted torch network in fp32 / TF32 / fp16 / bf16 against onnxruntime (CPU, fp32).

Converts the published u2netp.onnx (craftai_prepare.converters.u2netp), runs the torch network on
the chosen device in each precision, and prints one row per precision: the largest absolute
difference on the fused map and the smallest IoU of the >0.5 masks (against onnxruntime on the
CPU, over the probe and any photos given), then the median milliseconds per 320x320 batch of 1 and
of 8 (``--batch``; after a warm-up; CUDA events around each run, with synchronisation) and the peak GPU memory.

    python tools/gpu/u2netp_check.py .cache/models/u2netp.onnx                   # on the GPU machine
    python tools/gpu/u2netp_check.py .cache/models/u2netp.onnx --device cpu --batch 2 --iters 1  # smoke run
    ... --photos a.png b.jpg --channels-last --cudnn-benchmark

Run from the repository root, with the packages importable (the dev environment, or run_all.sh's PYTHONPATH).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import torch

from craftai_models.u2netp import INPUT_SIZE, U2NetP
from craftai_prepare.converters import u2netp as converter
from tools.gpu.timing import times_ms


@dataclass(frozen=True)
class Mode:
    """One way of running the network: fp32 (TF32 on or off), or autocast to a half type."""

    name: str
    autocast: torch.dtype | None
    tf32: bool


MODES = {
    "fp32": Mode("fp32", None, tf32=False),
    "tf32": Mode("fp32+tf32", None, tf32=True),
    "fp16": Mode("fp16 autocast", torch.float16, tf32=False),
    "bf16": Mode("bf16 autocast", torch.bfloat16, tf32=False),
}


@dataclass(frozen=True)
class Row:
    mode: str
    max_abs: float
    min_iou: float
    ms_1: float
    ms_n: float
    peak_mib: float | None


def set_tf32(allowed: bool) -> None:
    """TF32 for cuDNN convolutions and CUDA matmuls (the newer per-backend switch where torch has it)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "tf32" if allowed else "ieee"
        torch.backends.cuda.matmul.fp32_precision = "tf32" if allowed else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = allowed
        torch.backends.cuda.matmul.allow_tf32 = allowed


def rembg_picture(path: Path) -> converter.Array:
    """rembg's u2netp input: RGB, 320x320 LANCZOS, / its max, ImageNet mean/std."""
    from PIL import Image

    with Image.open(path) as img:
        rgb = img.convert("RGB").resize((INPUT_SIZE, INPUT_SIZE), Image.Resampling.LANCZOS)
    return converter.rembg_input(np.asarray(rgb))


def iou(a: npt.NDArray[np.bool_], b: npt.NDArray[np.bool_]) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


@contextlib.contextmanager
def precision(mode: Mode, device: torch.device) -> Iterator[None]:
    set_tf32(mode.tf32)
    if mode.autocast is None:
        yield
    else:
        with torch.autocast(device_type=device.type, dtype=mode.autocast):
            yield


def measure(
    net: torch.nn.Module,
    mode: Mode,
    inputs: converter.Array,
    reference: npt.NDArray[np.float64],
    args: argparse.Namespace,
) -> Row:
    """One row of the table: ``mode``'s accuracy on ``inputs``, then its timings on the probe."""
    device = torch.device(args.device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format

    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), precision(mode, device):
            fused: torch.Tensor = net(x.to(memory_format=fmt))[0]
        return fused

    x_all = torch.from_numpy(inputs).to(device)
    fused = np.concatenate([forward(x_all[i : i + 1]).float().cpu().numpy() for i in range(len(inputs))])
    max_abs = float(np.max(np.abs(fused.astype(np.float64) - reference)))
    min_iou = min(iou(fused[i] > 0.5, reference[i] > 0.5) for i in range(len(inputs)))

    probe = torch.from_numpy(converter.probe_input()).to(device)
    x1, xn = probe, probe.repeat(args.batch, 1, 1, 1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ms_1 = statistics.median(times_ms(lambda: forward(x1), device, reps=args.iters, warmup=args.warmup))
    ms_n = statistics.median(times_ms(lambda: forward(xn), device, reps=args.iters, warmup=args.warmup))
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return Row(mode.name, max_abs, min_iou, ms_1, ms_n, peak)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("onnx", type=Path, help="path of the published u2netp.onnx")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--iters", type=int, default=None, help="timed runs per batch (default 50; 3 on cpu)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 10; 1 on cpu)")
    parser.add_argument("--batch", type=int, default=8, help="the larger batch timed besides 1 (default 8)")
    parser.add_argument("--photos", type=Path, nargs="*", default=[], help="pictures compared besides the probe")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=sorted(MODES),
        default=None,
        help="precisions to run (default: all on a GPU; fp32 on the CPU, where the half types "
        "have no fast kernels on AVX2 and take ~50x longer; tf32 is a CUDA switch)",
    )
    parser.add_argument("--channels-last", action="store_true", help="feed NHWC tensors (module too)")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN pick algorithms by timing")
    parser.add_argument("--threads", type=int, default=None, help="torch/onnxruntime CPU threads")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    args.iters = args.iters if args.iters is not None else (3 if on_cpu else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if on_cpu else 10)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark

    import onnxruntime as ort

    model = onnx.load(str(args.onnx))
    state = converter.convert(model)
    inputs = np.concatenate([converter.probe_input(), *(rembg_picture(p) for p in args.photos)])
    reference = converter.run_reference(model, inputs, threads=args.threads or 1)[0].astype(np.float64)

    net = U2NetP()
    net.load_state_dict(state, strict=True)
    net = net.eval().to(device)
    if args.channels_last:
        net = net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"u2netp {args.onnx.name}: torch {torch.__version__} on {name}, onnxruntime {ort.__version__} (CPU) "
        f"as reference; {len(inputs)} input(s) (probe + {len(args.photos)} photo(s)); "
        f"median of {args.iters} after {args.warmup} warm-up; channels_last={args.channels_last}, "
        f"cudnn.benchmark={args.cudnn_benchmark}"
    )
    n = args.batch
    header = (
        f"{'mode':<14} {'max|d| fused':>12} {'min IoU>.5':>10} {'ms b=1':>9} {f'ms b={n}':>9} "
        f"{f'ms/img b={n}':>10} {'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for key in args.modes or (["fp32"] if on_cpu else list(MODES)):
        mode = MODES[key]
        try:
            row = measure(net, mode, inputs, reference, args)
        except RuntimeError as e:  # e.g. a dtype this build cannot autocast to on this device
            print(f"{mode.name:<14} not run: {e}")
            continue
        peak = f"{row.peak_mib:9.0f}" if row.peak_mib is not None else f"{'-':>9}"
        print(
            f"{row.mode:<14} {row.max_abs:12.2e} {row.min_iou:10.5f} {row.ms_1:9.2f} {row.ms_n:9.2f} "
            f"{row.ms_n / n:10.2f} {peak}"
        )
    set_tf32(False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
