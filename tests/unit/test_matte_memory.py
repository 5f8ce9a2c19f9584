"""What image.matte counts against the decode budget for the outputs it makes
(craftai_infer.features.matte.bytes_per_pixel) covers what making them holds: each output set is
made by pipelines/matte_outputs.render on the CPU in a fresh process and its peak memory (VmHWM,
reset before each; the median of three runs) compared with the estimate. Before the estimate
counted the outputs, a cutout of 7000x7000 was admitted as ~750 MiB and held ~9 GiB."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from craftai_infer.features.context import MATTE_BYTES_PER_PIXEL
from craftai_infer.features.matte import BACKGROUND_BYTES_PER_PIXEL, bytes_per_pixel
from craftai_infer.pipelines.matte_spec import Kind

WIDTH, HEIGHT = 800, 600
MiB = 1 << 20
SLACK = 8 * MiB  # torch's and the allocator's own blocks

CASES: dict[str, tuple[list[Kind], bool, str]] = {  # name -> (kinds, naive, background)
    "matte": (["matte"], False, "solid"),
    "mask": (["mask"], False, "solid"),
    "cutout": (["cutout"], False, "solid"),
    "naive cutout": (["cutout"], True, "solid"),
    "composite over a blur": (["composite"], False, "blur"),
    "naive composite over a blur": (["composite"], True, "blur"),
    "naive composite over a picture": (["composite"], True, "picture"),
    "everything": (["matte", "cutout", "composite", "mask"], False, "blur"),
}

MEASURE = """
import json, sys
from pathlib import Path
import numpy as np, torch
from craftai_infer import memory
from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_spec import Blur, Cover, OutputsSpec, Solid

torch.set_num_threads(1)
memory.prefer_mmap()  # as the service runs
width, height, cases = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
picture = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
other = rng.integers(0, 255, (height // 2, width // 2, 3), dtype=np.uint8)
row = np.clip((np.arange(width) - width / 3) / 4, 0, 255).astype(np.uint8)
matte = np.ascontiguousarray(np.broadcast_to(row, (height, width)))  # a soft edge: real estimation work

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

render(picture[:64, :64], matte[:64, :64], OutputsSpec(frozenset({"cutout"})), "cpu")  # torch warmed up
peaks = {name: [] for name in cases}
for _ in range(3):  # the median of three: one peak varied by ~15 MiB from run to run (allocator timing)
    for name, (kinds, naive, background) in cases.items():
        chosen = {"solid": Solid(), "blur": Blur(20.0), "picture": Cover(other)}[background]
        memory.trim()
        Path("/proc/self/clear_refs").write_text("5")
        before = status("VmRSS")
        rendered = render(picture, matte, OutputsSpec(frozenset(kinds), naive, chosen), "cpu")
        peaks[name].append(status("VmHWM") - before)
        del rendered
print(json.dumps({name: sorted(values)[1] for name, values in peaks.items()}))
"""


@pytest.fixture(scope="module")
def peaks() -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps([WIDTH, HEIGHT, CASES])],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    measured: dict[str, int] = json.loads(done.stdout)
    return measured


@pytest.mark.parametrize("name", list(CASES))
def test_what_a_matte_request_is_counted_covers_what_its_outputs_hold(peaks: dict[str, int], name: str) -> None:
    kinds, naive, _ = CASES[name]
    counted = (bytes_per_pixel(kinds, naive) - MATTE_BYTES_PER_PIXEL) * WIDTH * HEIGHT  # beyond the matte's own
    if CASES[name][2] == "picture":
        counted += BACKGROUND_BYTES_PER_PIXEL * (WIDTH // 2) * (HEIGHT // 2)
    print(f"{name}: held {peaks[name] / MiB:.1f} MiB, counted {counted / MiB:.1f} MiB")
    assert peaks[name] <= counted + SLACK, (name, peaks[name] / MiB, counted / MiB)
