#!/usr/bin/env python3
"""SAM 2.1 tiny in PyTorch on the GPU: accuracy against onnxruntime (CPU) and timings.

For the lent GPU machine (torch with CUDA; no network needed). It converts the ONNX pair given on
the command line with the prepare step's converter, runs the network on the probe of
`craftai_prepare.converters.sam21` in several precisions/layouts, compares every variant with
onnxruntime-CPU on the published graphs, and times the encoder alone and the decoder per click
(median and p90 of many runs after a warm-up, CUDA events on the GPU). Prints one table; exits 1
when a variant misses its tolerance (fp32: the converter's fp32 tolerances; tf32/bf16/fp16: every
mask's IoU with onnxruntime's >= 0.99).

    python tools/gpu/sam2_check.py --encoder DIR/encoder.onnx --decoder DIR/decoder.onnx
    python tools/gpu/sam2_check.py --device cpu --encoder-repeats 1 --decoder-repeats 2 --warmup 0 \\
        --encoder DIR/encoder.onnx --decoder DIR/decoder.onnx        # smoke run without a GPU

The fixture pair comes from craftai_dev.sam21 (random weights, the samexporter contract).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from craftai_models.sam2.model import Sam2ImageModel, build_sam21_tiny
from craftai_prepare.converters import sam21
from tools.gpu.timing import times_ms

REDUCED_PRECISION = sam21.Tolerances(feature_atol=None, logit_atol=None, mask_iou_min=0.99, iou_pred_atol=None)
DECODER_BATCH = 8  # prompt sets per call for the batched-decoder timing


@dataclass(frozen=True)
class Variant:
    """One way of running the network."""

    name: str
    autocast: torch.dtype | None
    channels_last: bool = False
    tf32: bool = False
    decoder_fp32: bool = False  # reduced precision for the encoder only (the decoder is cheap per click)

    @property
    def tolerances(self) -> sam21.Tolerances:
        return sam21.FP32 if self.autocast is None and not self.tf32 else REDUCED_PRECISION

    @property
    def decoder_autocast(self) -> torch.dtype | None:
        return None if self.decoder_fp32 else self.autocast


VARIANTS = {
    v.name: v
    for v in (
        Variant("fp32", None),
        Variant("tf32", None, tf32=True),
        Variant("bf16", torch.bfloat16),
        Variant("bf16-enc", torch.bfloat16, decoder_fp32=True),
        Variant("bf16+cl", torch.bfloat16, channels_last=True),
        Variant("fp16", torch.float16),
        Variant("fp16-enc", torch.float16, decoder_fp32=True),
        Variant("fp16+cl", torch.float16, channels_last=True),
    )
}


@dataclass
class Row:
    """Everything measured for one variant."""

    variant: str
    encoder_ms_median: float = float("nan")
    encoder_ms_p90: float = float("nan")
    decoder_ms_median: float = float("nan")
    decoder_ms_p90: float = float("nan")
    decoder_batch_ms_per_set: float = float("nan")
    encoder_peak_mib: float = float("nan")
    feature_max_abs: float = float("nan")
    logits_max_abs: float = float("nan")
    mask_iou_min: float = float("nan")
    iou_pred_max_abs: float = float("nan")
    failures: tuple[str, ...] = ()
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures and not self.error


@contextlib.contextmanager
def precision(device: torch.device, variant: Variant, dtype: torch.dtype | None) -> Iterator[None]:
    """TF32 switches for the variant (restored after), inference mode and autocast to `dtype`."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("high" if variant.tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = variant.tf32
    mixed: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if dtype is not None:
        mixed = torch.autocast(device.type, dtype=dtype)
    try:
        with torch.inference_mode(), mixed:
            yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]


def to_channels_last(net: Sam2ImageModel) -> Sam2ImageModel:
    """Conv weights (the 4-D parameters) in channels-last layout, as `Module.to(memory_format=...)` does."""
    with torch.no_grad():
        for param in net.parameters():
            if param.ndim == 4:
                param.data = param.data.contiguous(memory_format=torch.channels_last)
    return net


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def p90(values: list[float]) -> float:
    return float(np.percentile(values, 90)) if values else float("nan")


def measure(
    net: Sam2ImageModel, variant: Variant, device: torch.device, reference: sam21.ProbeOutputs, args: argparse.Namespace
) -> Row:
    """Accuracy on the probe, then the timings, for one variant."""
    row = Row(variant.name)
    memory_format = torch.channels_last if variant.channels_last else torch.contiguous_format
    with precision(device, variant, None):  # (probe_network sets autocast per half itself)
        ours = sam21.probe_network(
            net,
            device=device,
            encoder_autocast=variant.autocast,
            decoder_autocast=variant.decoder_autocast,
            channels_last=variant.channels_last,
        )
    report = sam21.compare_probe(ours, reference)
    row.feature_max_abs = report.feature_max
    row.logits_max_abs = report.logits_max_abs
    row.mask_iou_min = report.mask_iou_min
    row.iou_pred_max_abs = report.iou_pred_max_abs
    row.failures = tuple(report.failures(variant.tolerances))

    image = torch.from_numpy(sam21.probe_image()).to(device).contiguous(memory_format=memory_format)
    with precision(device, variant, variant.autocast):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        feats: tuple[torch.Tensor, ...] = net.encode(image)
        sync(device)
        if device.type == "cuda":
            row.encoder_peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
        enc = times_ms(lambda: net.encode(image), device, reps=args.encoder_repeats, warmup=args.warmup)
    with precision(device, variant, variant.decoder_autocast):
        if variant.decoder_fp32:
            feats = tuple(f.float() for f in feats)

        def prompt(n: int) -> tuple[torch.Tensor, ...]:
            coords = torch.tensor([[[358.0, 410.0]]], device=device).expand(n, 1, 2).contiguous()
            return (
                coords,
                torch.ones(n, 1, device=device),
                torch.zeros(n, 1, 256, 256, device=device),
                torch.zeros(n, device=device),
            )

        one, many = prompt(1), prompt(DECODER_BATCH)
        dec = times_ms(
            lambda: net.decode(feats[2], feats[0], feats[1], *one),
            device,
            reps=args.decoder_repeats,
            warmup=args.warmup,
        )
        batch = times_ms(
            lambda: net.decode(feats[2], feats[0], feats[1], *many),
            device,
            reps=max(1, args.decoder_repeats // 4),
            warmup=args.warmup,
        )
    row.encoder_ms_median, row.encoder_ms_p90 = statistics.median(enc), p90(enc)
    row.decoder_ms_median, row.decoder_ms_p90 = statistics.median(dec), p90(dec)
    row.decoder_batch_ms_per_set = statistics.median(batch) / DECODER_BATCH
    return row


def print_table(rows: list[Row]) -> None:
    head = (
        f"{'variant':<9} {'enc ms':>8} {'enc p90':>8} {'dec ms':>7} {'dec p90':>8} {'dec/set x8':>10} "
        f"{'enc MiB':>8} {'|dFeat|':>9} {'|dLogit|':>9} {'min IoU':>8} {'|dIoUp|':>9}  check"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        if r.error:
            print(f"{r.variant:<9} error: {r.error}")
            continue
        print(
            f"{r.variant:<9} {r.encoder_ms_median:8.2f} {r.encoder_ms_p90:8.2f} {r.decoder_ms_median:7.2f} "
            f"{r.decoder_ms_p90:8.2f} {r.decoder_batch_ms_per_set:10.3f} {r.encoder_peak_mib:8.0f} "
            f"{r.feature_max_abs:9.2e} {r.logits_max_abs:9.2e} {r.mask_iou_min:8.5f} {r.iou_pred_max_abs:9.2e}  "
            f"{'ok' if r.ok else 'FAIL'}"
        )
    for r in rows:
        for failure in r.failures:
            print(f"  {r.variant}: {failure}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--encoder", type=Path, required=True, help="encoder.onnx (samexporter contract)")
    parser.add_argument("--decoder", type=Path, required=True, help="decoder.onnx (samexporter contract)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument(
        "--variants",
        default=None,
        help=f"comma-separated, from {','.join(VARIANTS)} (default: all on cuda, fp32,bf16 on cpu)",
    )
    parser.add_argument("--encoder-repeats", type=int, default=50)
    parser.add_argument("--decoder-repeats", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--ort-threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device answers; use --device cpu for a smoke run", file=sys.stderr)
        return 2
    names = (args.variants or ("fp32,bf16" if device.type == "cpu" else ",".join(VARIANTS))).split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), device {device} = {gpu}, "
        f"python {platform.python_version()}"
    )
    t0 = time.perf_counter()
    state = sam21.convert(sam21.load_onnx(args.encoder), sam21.load_onnx(args.decoder))
    print(f"converted {len(state)} tensors in {time.perf_counter() - t0:.1f} s (converter v{sam21.CONVERTER_VERSION})")
    t0 = time.perf_counter()
    reference = sam21.probe_onnxruntime(args.encoder, args.decoder, threads=args.ort_threads)
    print(f"onnxruntime-CPU probe in {time.perf_counter() - t0:.1f} s")

    base = build_sam21_tiny(state).to(device)
    channels_last = to_channels_last(copy.deepcopy(base))
    rows: list[Row] = []
    for name in names:
        variant = VARIANTS[name]
        net = channels_last if variant.channels_last else base
        try:
            rows.append(measure(net, variant, device, reference, args))
        except Exception as exc:  # one variant's failure (an unsupported dtype on this device) is reported
            rows.append(Row(name, error=f"{type(exc).__name__}: {exc}"))
        print(f"  {name} done", file=sys.stderr)
    print(
        f"encoder: batch 1, {args.encoder_repeats} runs; decoder: 1 click (1 point, no mask), {args.decoder_repeats} "
        f"runs, and {DECODER_BATCH} prompt sets per call; warm-up {args.warmup}"
    )
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "ok": r.ok} for r in rows], indent=2) + "\n")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
