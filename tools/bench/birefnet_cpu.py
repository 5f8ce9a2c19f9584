"""BiRefNet_lite on the CPU: seconds per picture and peak memory of both routes at 512² and 1024²,
one run (on a shared machine only the ratios mean something).

    .venv/bin/python -m tools.bench.birefnet_cpu [--sizes 512,1024] [--reps 3] [--threads 0]

Each (route, size) runs in a process of its own, so that its peak RSS (ru_maxrss) is its own, and
reports wall seconds and CPU seconds (all threads) per picture: on a shared machine the CPU time
is the fairer measure of the work, the wall time depends on what else runs. The
route as the service builds it (torch: `BirefnetTorch`, the network as loaded, fp32; onnxruntime:
`BirefnetOnnx` on the calibrated fixture exported with the published contract at that size,
craftai_dev.birefnet_fixture), then one picture (astronaut, 1024x1024 PNG decoded) through the
whole pipeline: one warm-up call, then the median of --reps calls. The torch route's network side
is the recipe's 1024; at 512 the same route runs with the pipeline's side set to 512.
`--onnx FILE` times that graph instead of the fixture's export (the published one, once at hand:
its deformable convolutions are lowered differently from this project's export).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def measure(route: str, size: int, reps: int, threads: int, onnx: str = "") -> dict[str, Any]:
    import numpy as np
    import torch
    from PIL import Image

    from craftai_dev.birefnet_fixture import checkpoints, onnx_file, prepared_folder
    from craftai_dev.samples import photos
    from craftai_infer.pipelines.matte_birefnet import BirefnetSettings
    from craftai_infer.routes import RouteFiles

    if threads:
        torch.set_num_threads(threads)
    picture = np.asarray(Image.open(photos()["astronaut.png"]).convert("RGB"))
    built: Any
    if route == "torch":
        from craftai_infer.routes.birefnet_torch import BirefnetTorch

        made = checkpoints()["random"]
        built = BirefnetTorch(RouteFiles({}, prepared_folder(made), threads), "cpu")
        built.settings = BirefnetSettings(size=size)
    else:
        from craftai_infer.routes.birefnet_onnx import BirefnetOnnx

        path = Path(onnx) if onnx else onnx_file(size).path
        built = BirefnetOnnx(RouteFiles({"network": path}, None, threads), "cpu")
    loaded_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    built.matte([picture])
    samples, cpu = [], []
    for _ in range(reps):
        started, started_cpu = time.perf_counter(), time.process_time()
        built.matte([picture])
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {
        "route": route,
        "size": size,
        "seconds_per_picture": statistics.median(samples),
        "cpu_seconds_per_picture": statistics.median(cpu),
        "samples": samples,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_after_load_mib": loaded_rss,
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="512,1024")
    parser.add_argument("--routes", default="torch,onnxruntime")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: one per core (the service's default)")
    parser.add_argument("--onnx", default="", help="an ONNX graph to time instead of the fixture's export")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # route:size, in the child process
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    args = parser.parse_args(argv)
    if args.one:
        route, size = args.one.split(":")
        print(json.dumps(measure(route, int(size), args.reps, args.threads, args.onnx)))
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        for route in args.routes.split(","):
            command = [sys.executable, __file__, "--one", f"{route}:{size}", "--reps", str(args.reps)]
            command += ["--threads", str(args.threads), "--onnx", args.onnx]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{route} at {size}² failed:\n{done.stderr[-3000:]}")
            found = json.loads(done.stdout.strip().splitlines()[-1])
            results.append(found)
            print(
                f"{route:12s} {size:5d}²  {found['seconds_per_picture']:7.2f} s/picture "
                f"({found['cpu_seconds_per_picture']:6.2f} CPU s)  "
                f"peak RSS {found['peak_rss_mib']:7.0f} MiB  (after load {found['rss_after_load_mib']:.0f} MiB, "
                f"{found['threads']} threads)",
                flush=True,
            )
    load = os.getloadavg()
    print(f"cores {os.cpu_count()}, load average at the end {load[0]:.1f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "birefnet_cpu.json").write_text(json.dumps({"results": results, "cores": os.cpu_count()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
