"""What a matte route holds on the CPU for one picture, measured against what the service counts
for it (`MatteRoute.working_bytes`, admitted with each request's cost: docs/SECURITY.md, "Memory").

Each case runs in a fresh process: the route built from its random-weight fixture (the published
architecture: the same activations), warmed on a small picture, then the peak resident memory
(VmHWM, reset before) of one matte of a random picture of the size asked, over the warm size.

    .venv/bin/python -m tools.bench.working_memory                       # InSPyReNet and BiRefNet_lite
    .venv/bin/python -m tools.bench.working_memory --case inspyrenet:320  # one case
    .venv/bin/python -m tools.bench.working_memory --case cloth:1024      # u2net_cloth_seg (onnxruntime)
    .venv/bin/python -m tools.bench.working_memory --case dynamic:1024    # birefnet-dynamic (Swin-L, torch)

The Swin-L case runs a random Swin-L network as the published files store it (uncalibrated: the
activations' memory does not depend on the weights' values) at the picture's own size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tools.bench import harness

MiB = 1 << 20
CASES = ("inspyrenet:640", "inspyrenet:1280", "birefnet:1024")

MEASURE = """
import json, sys
import numpy as np
import torch
from craftai_infer import memory
from craftai_infer.pipelines.matte_spec import OutputsSpec
from craftai_infer.routes import MATTE, MatteJob, RouteFiles
from craftai_infer.routes.registry import factories

torch.set_num_threads(2)
memory.prefer_mmap()  # as the service runs
which, side = sys.argv[1], int(sys.argv[2])
if which == "cloth":
    from craftai_dev.u2net_cloth_fixture import onnx_file
    files = RouteFiles({"network": onnx_file()}, None, 2)
    key = ("u2net_cloth_seg", "onnxruntime")
elif which == "dynamic":
    from craftai_dev.birefnet_fixture import prepared_folder, swin_l_file
    from craftai_models.birefnet import Architecture, PatchOrder
    files = RouteFiles({}, prepared_folder(swin_l_file(), PatchOrder.CHANNEL_MAJOR, Architecture.SWIN_L), 2)
    key = ("birefnet-dynamic", "torch")
else:
    if which == "inspyrenet":
        from craftai_dev.inspyrenet_fixture import checkpoints
        key = ("inspyrenet-swinb", "torch")
    else:
        from craftai_dev.birefnet_fixture import checkpoints
        key = ("birefnet-lite", "torch")
    files = RouteFiles({"weights": checkpoints()["random"].path}, None, 2)
route = factories()[key](files, "cpu")
height, width = side * 3 // 4, side
MATTE.call(route, [MatteJob(np.zeros((64, 64, 3), np.uint8), OutputsSpec(frozenset({"matte"})))])
memory.trim()

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

picture = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
warm = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
MATTE.call(route, [MatteJob(picture, OutputsSpec(frozenset({"matte"})))])
peak = status("VmHWM") - warm - picture.nbytes
print(json.dumps({"case": f"{which}:{side}", "height": height, "width": width, "peak_bytes": peak,
                  "counted_bytes": route.working_bytes(height, width)}))
"""


def measure(case: str) -> dict[str, Any]:
    which, side = case.split(":")
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, which, side], capture_output=True, text=True, check=True, timeout=1800
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--case", action="append", help="route:width (4:3 pictures), e.g. inspyrenet:640")
    parser.add_argument("--json", type=Path, default=harness.REPO / "out" / "bench" / "working_memory.json")
    args = parser.parse_args(argv)
    results = [measure(case) for case in args.case or CASES]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    for r in results:
        print(
            f"{r['case']:18} {r['width']}x{r['height']}: peak +{r['peak_bytes'] / MiB:,.0f} MiB, "
            f"counted {r['counted_bytes'] / MiB:,.0f} MiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
