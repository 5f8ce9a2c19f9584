"""The engines that could run u2netp on the CPU, timed against each other on this machine.

    .venv/bin/python -m tools.bench.cpu_engines                 # every engine installed, the sample photos
    .venv/bin/python -m tools.bench.cpu_engines --tiny          # one photo, one round (CI: tests/bench)

Each engine runs the real u2netp network on the rembg-compatible input of each photo
(pipelines/matte_u2netp.py), its matte made by the same post-processing; the matte is compared with
onnxruntime's as rembg opens it (default session options), the bar the route must keep: within
1/255, and the IoU of the >0.5 masks 1.0. The engines are timed in interleaved rounds (one call of
each in turn, the order rotated), and each engine's median is reported with its ratio to rembg's
session, the median of the rounds' ratios, so a drifting load biases none of them.

Engines: onnxruntime as rembg opens it; onnxruntime as the route opened it before (all graph
optimisations, one inter-op thread); onnxruntime with the intra-op threads sleeping instead of
spinning when idle (what the route does now: craftai_models.onnx_sessions); OpenVINO (runs the
ONNX file directly; when the `openvino` package is installed; latency and throughput hints, in its
default precision, bf16 on CPUs that have it, and in f32); torch (the converted network, fp32,
contiguous and channels-last, oneDNN as torch ships it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench import harness

REPO = Path(__file__).resolve().parents[2]

Forward = Callable[[np.ndarray], np.ndarray]  # f32[1,3,320,320] -> the fused map f32[1,1,320,320]


def onnxruntime_engines(model: Path) -> dict[str, Forward]:
    import onnxruntime as ort

    from craftai_models.onnx_sessions import open_session

    def wrap(session: Any) -> Forward:
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0]

    rembg_like = ort.InferenceSession(str(model), sess_options=ort.SessionOptions(), providers=["CPUExecutionProvider"])
    before = ort.SessionOptions()
    before.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    before.inter_op_num_threads = 1
    return {
        "onnxruntime, rembg's options (reference)": wrap(rembg_like),
        "onnxruntime, the route's options before": wrap(
            ort.InferenceSession(str(model), sess_options=before, providers=["CPUExecutionProvider"])
        ),
        "onnxruntime, all optimisations, threads spin when idle": wrap(open_session(model, "cpu", spin=True)),
        "onnxruntime, all optimisations, threads sleep when idle": wrap(open_session(model, "cpu", spin=False)),
    }


def openvino_engines(model: Path) -> dict[str, Forward]:
    try:
        import openvino as ov
    except ImportError:
        return {}
    core = ov.Core()
    engines: dict[str, Forward] = {}
    # Its CPU plugin computes in bf16 where the CPU has it unless told f32 (INFERENCE_PRECISION_HINT).
    for hint, precision in (("LATENCY", ""), ("THROUGHPUT", ""), ("LATENCY", "f32"), ("THROUGHPUT", "f32")):
        config = {"PERFORMANCE_HINT": hint, **({"INFERENCE_PRECISION_HINT": precision} if precision else {})}
        compiled = core.compile_model(str(model), "CPU", config)
        request = compiled.create_infer_request()
        output = compiled.outputs[0]

        def forward(x: np.ndarray, request: Any = request, output: Any = output) -> np.ndarray:
            return np.asarray(request.infer({0: x})[output])

        chosen = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # "bf16", "f32"
        engines[f"OpenVINO {ov.__version__.split('-')[0]}, {hint.lower()} hint, {chosen}"] = forward
    return engines


def torch_engines(model: Path) -> dict[str, Forward]:
    import onnx
    import torch

    from craftai_models.u2netp import U2NetP
    from craftai_prepare.converters.u2netp import convert

    module = U2NetP()
    module.load_state_dict(convert(onnx.load(str(model))), strict=True)
    module.eval()
    last = U2NetP()
    last.load_state_dict(module.state_dict())
    last = last.eval().to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    def forward(net: torch.nn.Module, channels_last: bool) -> Forward:
        def run(x: np.ndarray) -> np.ndarray:
            t = torch.from_numpy(x)
            if channels_last:
                t = t.contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                out: np.ndarray = net(t)[0].float().contiguous().numpy()
            return out

        return run

    return {
        f"torch {torch.__version__.split('+')[0]}, fp32": forward(module, False),
        f"torch {torch.__version__.split('+')[0]}, fp32 channels-last": forward(last, True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="one photo, one round: checks that it runs")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", default="", help="the engines whose name holds this text (and the reference)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    from PIL import Image

    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos
    from craftai_infer.pipelines import matte_u2netp

    model = u2netp_onnx()
    names = ["chelsea.png"] if options.tiny else ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]
    pictures = [np.asarray(Image.open(photos()[n]).convert("RGB")) for n in names]
    inputs = [matte_u2netp.preprocess(p) for p in pictures]
    engines = {**onnxruntime_engines(model), **openvino_engines(model), **torch_engines(model)}
    reference = next(iter(engines))
    engines = {k: v for k, v in engines.items() if k == reference or options.only in k}

    def matte(forward: Forward, i: int) -> np.ndarray:
        h, w = pictures[i].shape[:2]
        return matte_u2netp.postprocess(forward(inputs[i]), (w, h))

    expected = [matte(engines[reference], i) for i in range(len(inputs))]
    rows: dict[str, dict[str, Any]] = {}
    for name, forward in engines.items():
        mattes = [matte(forward, i) for i in range(len(inputs))]  # also the warm-up
        diffs = [int(np.abs(m.astype(int) - e.astype(int)).max()) for m, e in zip(mattes, expected, strict=True)]
        ious = [_iou(m > 127, e > 127) for m, e in zip(mattes, expected, strict=True)]
        rows[name] = {"max_abs_diff": max(diffs), "min_iou": min(ious), "ms": []}
    rounds = 1 if options.tiny else options.rounds
    names_in_order = list(engines)
    for r in range(rounds):
        for name in names_in_order[r % len(names_in_order) :] + names_in_order[: r % len(names_in_order)]:
            for x in inputs:
                started = time.perf_counter()
                engines[name](x)
                rows[name]["ms"].append((time.perf_counter() - started) * 1000)
    base = rows[reference]["ms"]
    for row in rows.values():
        row["median_ms"] = statistics.median(row["ms"])
        row["speed_vs_reference"] = statistics.median(b / a for a, b in zip(row["ms"], base, strict=True))
    result = {
        "photos": names,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "engines": rows,
    }
    harness.write_report(options.out, "cpu_engines", result, report(result))
    return 0


def report(result: dict[str, Any]) -> str:
    lines = [
        f"u2netp network on the CPU ({result['cpus']} cores, load average {result['load_average'][0]:.1f}), "
        f"{len(result['photos'])} photos x {result['rounds']} interleaved rounds",
        "",
        "| engine | median ms | speed vs rembg's session (median of per-call ratios) "
        "| matte max diff /255 | IoU >0.5 |",
        "|---|---|---|---|---|",
    ]
    for name, row in result["engines"].items():
        lines.append(
            f"| {name} | {row['median_ms']:.1f} | {row['speed_vs_reference']:.2f} | {row['max_abs_diff']} | "
            f"{row['min_iou']:.4f} |"
        )
    return "\n".join(lines) + "\n"


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


if __name__ == "__main__":
    raise SystemExit(main())
