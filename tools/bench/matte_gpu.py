"""InSPyReNet Swin-B on the GPU: this project's network and pipeline against transparent-background's
network, same random weights, same GPU, one run.

    python -m tools.bench.matte_gpu [--device cuda] [--reps 20] [--out DIR]

Network alone (median ms of the forward, device synchronised, after warm-up) at 1024² and 1280²:
the reference in fp32 and fp16 autocast; ours as loaded (fp32, fp16), and as the GPU route runs it
(BatchNorm folded, channels-last, autocast, CUDA graph). Then the whole pipeline (host uint8 picture
in, host uint8 matte out) through the GPU route: 1280x960 (full resolution path) and 4000x3000
(reduce to 1280², enlarge, refine, fringe shrink), and beside it the peer's whole pipeline,
transparent-background's `Remover.process()` (type "map", and "rgba", which adds pymatting's
foreground estimation) on the same pictures with the same weights, where its package imports.
Writes matte_gpu.json and matte_gpu.md.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from craftai_dev.inspyrenet_reference import build_reference, randomised_state_dict
from craftai_infer.engines.cuda_graphs import GraphCache
from craftai_infer.pipelines.matte_inspyrenet import matte_inspyrenet
from craftai_models.inspyrenet import fold_batchnorm, inspyrenet_swin_b
from tools.bench.harness import timed_on

REPO = Path(__file__).resolve().parents[2]

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


def peer_pipeline(
    pictures: dict[str, np.ndarray], state: dict[str, torch.Tensor], device: torch.device, reps: int, warmup: int
) -> dict[str, Any]:
    """transparent-background's own whole pipeline, `Remover.process()` in its `base` mode without
    TorchScript, on each picture with `state` (saved in its .pth layout): ms by picture and output
    type; {"unavailable": why} where its package does not import or run (it imports wget, gdown and
    albumentations at its top, which the dev environment does not install)."""
    import tempfile

    try:
        from transparent_background import Remover
    except Exception as exc:
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as folder:
        weights = Path(folder) / "inspyrenet.pth"
        torch.save(state, weights)
        try:
            them = Remover(mode="base", jit=False, device=str(device), ckpt=str(weights))
            found: dict[str, Any] = {}
            for label, rgb in pictures.items():
                picture = Image.fromarray(rgb)
                found[label] = {
                    kind: timed_on(functools.partial(them.process, picture, type=kind), reps, warmup, device)
                    for kind in ("map", "rgba")
                }
            return found
        except Exception as exc:
            return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}


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
        help="the pipeline's networks with the checkpoint calibrated at this side (craftai_dev."
        "inspyrenet_fixture: its matte has edges, so the refinement works); 0: the random weights",
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

        from craftai_dev.inspyrenet_fixture import calibrated

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
    from craftai_dev.samples import photos

    photo = Image.open(photos()["astronaut.png"]).convert("RGB")
    pipeline: dict[str, float] = {}
    pictures: dict[str, np.ndarray] = {}
    for label in options.pictures.split(","):
        w, h = (int(v) for v in label.split("x"))
        rgb = pictures[label] = np.asarray(photo.resize((w, h), Image.Resampling.BICUBIC))
        for name in pipeline_dtypes:
            route = optimised[name]
            with torch.inference_mode():
                run = functools.partial(matte_inspyrenet, rgb, route, device=device, autocast=DTYPES[name])
                pipeline[f"{label} {name}"] = timed_on(run, options.reps, min(2, options.warmup), device)
        print(label, pipeline, flush=True)
    peer = peer_pipeline(pictures, state, device, options.reps, min(2, options.warmup))
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "network_ms": rows,
        "pipeline_ms": pipeline,
        "peer_pipeline_ms": peer,
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
    if "unavailable" in peer:
        lines += ["", f"peer, transparent-background `Remover.process()`: not measured ({peer['unavailable']})"]
    else:
        lines += ["", "| peer: transparent-background `Remover.process()` | type | ms |", "|---|---|---|"]
        lines += [f"| {label} | {kind} | {ms:.1f} |" for label, kinds in peer.items() for kind, ms in kinds.items()]
    (options.out / "matte_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
