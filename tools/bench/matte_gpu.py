"""InSPyReNet Swin-B on the GPU: this project's network and pipeline against transparent-background's
network, same random weights, same GPU, one run.

    python tools/bench/matte_gpu.py [--device cuda] [--reps 20] [--out DIR]

Network alone (median ms of the forward, device synchronised, after warm-up) at 1024² and 1280²:
the reference in fp32 and fp16 autocast; ours as loaded (fp32, fp16), and as the GPU route runs it
(BatchNorm folded, channels-last, autocast, CUDA graph). Then the whole pipeline (host uint8 picture
in, host uint8 matte out) through the GPU route: 1280x960 (full resolution path) and 4000x3000
(reduce to 1280², enlarge, refine, fringe shrink). Writes matte_gpu.json and matte_gpu.md.
With --calibrated SIDE (run.py passes 1280) the optimised networks load the calibrated random
checkpoint, whose matte has edges for the refinement to filter (the network timings do not depend
on the weights).

--dtypes narrows the precisions (the CPU check of run.py --tiny runs fp32 only: autocast to fp16 or
bf16 on the CPU costs minutes and tells nothing there); the pipeline runs the reduced precisions of
the list, or fp32 when the list has none.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
for src in (
    "clients/wire/src",
    "clients/python/src",
    "services/common/src",
    "services/models/src",
    "services/infer/src",
    ".",
):
    if str(REPO / src) not in sys.path:
        sys.path.insert(0, str(REPO / src))

from craftai_infer.engines.cuda_graphs import GraphCache  # noqa: E402
from craftai_infer.pipelines.matte_inspyrenet import matte_inspyrenet  # noqa: E402
from craftai_models.inspyrenet import fold_batchnorm, inspyrenet_swin_b  # noqa: E402
from tests.support.inspyrenet_reference import build_reference, randomised_state_dict  # noqa: E402
from tools.bench.harness import timed_on  # noqa: E402

DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def forward(net: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype | None) -> Callable[[], Any]:
    def run() -> Any:
        with torch.inference_mode(), torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
            return net(x)

    return run


class Optimised:
    """What the GPU route does to the network (routes/inspyrenet.py)."""

    def __init__(self, net: torch.nn.Module, device: torch.device, dtype: torch.dtype | None) -> None:
        fold_batchnorm(net)
        net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.net, self.dtype = net, dtype
        self.graphs = GraphCache(self._net, device, capacity=6) if device.type == "cuda" else None

    def _net(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        with torch.autocast(x.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            return (self.net(x.contiguous(memory_format=torch.channels_last)),)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.graphs is None:
            return self._net(x)[0]
        return self.graphs.run(tuple(x.shape), [x])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sizes", default="1024,1280")
    parser.add_argument("--pictures", default="1280x960,4000x3000", help="pipeline picture sizes")
    parser.add_argument("--dtypes", default="fp16,bf16,fp32", help=f"precisions, from {', '.join(DTYPES)}")
    parser.add_argument(
        "--calibrated",
        type=int,
        default=0,
        help="the pipeline's networks with the checkpoint calibrated at this side (tests/support/"
        "inspyrenet_fixture.py: its matte has edges, so the refinement works); 0: the random weights",
    )
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    options = parser.parse_args(argv)
    dtypes = options.dtypes.split(",")
    unknown = set(dtypes) - set(DTYPES)
    if unknown:
        parser.error(f"unknown precisions {sorted(unknown)}; from {', '.join(DTYPES)}")
    network_dtypes = [name for name in ("fp32", "fp16") if name in dtypes]
    pipeline_dtypes = [name for name in dtypes if name != "fp32"] or ["fp32"]
    device = torch.device(options.device)
    options.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    reference = build_reference((1024, 1024), allow_missing_kornia=True)
    state = randomised_state_dict(reference, seed=0)
    reference.load_state_dict(state)
    reference.to(device).eval()
    ours = inspyrenet_swin_b()
    ours.load_state_dict(state)
    ours.to(device).eval()
    rows: dict[str, dict[str, float]] = {}
    sizes = [int(s) for s in options.sizes.split(",")]
    for size in sizes:
        x = torch.randn(1, 3, size, size, device=device)
        for name in network_dtypes:
            dtype = DTYPES[name]
            rows.setdefault(f"reference {name}", {})[str(size)] = timed_on(
                forward(reference, x, dtype), options.reps, options.warmup, device
            )
            rows.setdefault(f"ours {name}", {})[str(size)] = timed_on(
                forward(ours, x, dtype), options.reps, options.warmup, device
            )
        print(size, {k: v.get(str(size)) for k, v in rows.items()}, flush=True)
    del reference
    if options.calibrated:
        from safetensors.torch import load_file

        from tests.support.inspyrenet_fixture import calibrated

        state = load_file(str(calibrated(options.calibrated, str(device)).path))
    optimised = {}
    for name in dtypes:
        net = inspyrenet_swin_b()
        net.load_state_dict(state)
        optimised[name] = Optimised(net.to(device).eval(), device, DTYPES[name])
        for size in sizes:
            x = torch.randn(1, 3, size, size, device=device)
            with torch.inference_mode():
                run_net = functools.partial(optimised[name], x)
                rows.setdefault(f"ours route {name} (folded, channels-last, graph)", {})[str(size)] = timed_on(
                    run_net, options.reps, options.warmup, device
                )
        print(name, rows[f"ours route {name} (folded, channels-last, graph)"], flush=True)
    from tools.samples import photos

    photo = Image.open(photos()["astronaut.png"]).convert("RGB")
    pipeline: dict[str, float] = {}
    for label in options.pictures.split(","):
        w, h = (int(v) for v in label.split("x"))
        rgb = np.asarray(photo.resize((w, h), Image.Resampling.BICUBIC))
        for name in pipeline_dtypes:
            route = optimised[name]
            with torch.inference_mode():
                run = functools.partial(matte_inspyrenet, rgb, route, device=device, autocast=DTYPES[name])
                pipeline[f"{label} {name}"] = timed_on(run, options.reps, min(2, options.warmup), device)
        print(label, pipeline, flush=True)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "network_ms": rows,
        "pipeline_ms": pipeline,
    }
    (options.out / "matte_gpu.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"InSPyReNet Swin-B on {result['device']} (torch {result['torch']}), median of {options.reps}",
        "",
        "| network | " + " | ".join(f"{s}² ms" for s in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    lines += [f"| {k} | " + " | ".join(f"{v[str(s)]:.1f}" for s in sizes) + " |" for k, v in rows.items()]
    lines += ["", "| whole pipeline (host uint8 in, uint8 matte out) | ms |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in pipeline.items()]
    (options.out / "matte_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
