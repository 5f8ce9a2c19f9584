"""What a cutout session's refinement counts against the decode budget (features/cutout.py:
MERGE_BYTES_PER_PIXEL beyond its outputs' bytes_per_pixel and its masks) covers what
pipelines/cutout_merge.refined holds: measured as tests/unit/test_matte_memory.py measures the
matte's outputs (on the CPU in a fresh process, VmHWM reset before each, the median of three runs),
in the worst case, one region as large as the picture: the guided filter runs on every pixel and
every alpha changes, so the colours are estimated again on the whole picture."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from craftai_infer.features.context import MATTE_BYTES_PER_PIXEL
from craftai_infer.features.cutout import MERGE_BYTES_PER_PIXEL
from craftai_infer.features.matte import bytes_per_pixel
from craftai_infer.pipelines.matte_spec import Kind

WIDTH, HEIGHT = 800, 600
MiB = 1 << 20
SLACK = 8 * MiB  # torch's and the allocator's own blocks

CASES: dict[str, tuple[list[Kind], bool]] = {  # name -> (kinds, naive); a composite is over a blur
    "matte": (["matte"], False),
    "cutout": (["cutout"], False),
    "naive cutout": (["cutout"], True),
    "everything": (["matte", "cutout", "composite", "mask"], False),
}

MEASURE = """
import json, sys
from pathlib import Path
import numpy as np, torch
from craftai_infer import memory
from craftai_infer.pipelines.cutout_merge import refined
from craftai_infer.pipelines.matte_spec import Blur, OutputsSpec

torch.set_num_threads(1)
memory.prefer_mmap()  # as the service runs
width, height, cases = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
picture = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
row = np.clip((np.arange(width) - width / 3) / 4, 0, 255).astype(np.uint8)
matte = np.ascontiguousarray(np.broadcast_to(row, (height, width)))  # kept by the session
colours = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)  # kept by the session
whole = np.ones((height, width), dtype=np.bool_)  # SAM's mask, decoded before the merge

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

def run(kinds, naive, size):
    spec = OutputsSpec(frozenset(kinds), naive, Blur(20.0))
    given = colours[:size[0], :size[1]] if not naive and {"cutout", "composite"} & set(kinds) else None
    part = (slice(0, size[0]), slice(0, size[1]))
    return refined(picture[part], matte[part], given, spec, [(True, whole[part])], device="cpu")

run(["cutout"], False, (64, 64))  # torch warmed up
peaks = {name: [] for name in cases}
for _ in range(3):  # the median of three, as test_matte_memory
    for name, (kinds, naive) in cases.items():
        memory.trim()
        Path("/proc/self/clear_refs").write_text("5")
        before = status("VmRSS")
        answer = run(kinds, naive, (height, width))
        peaks[name].append(status("VmHWM") - before)
        del answer
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
def test_what_a_refinement_is_counted_covers_what_it_holds(peaks: dict[str, int], name: str) -> None:
    kinds, naive = CASES[name]
    pixels = WIDTH * HEIGHT
    # beyond what the session keeps (the picture, the matte, the colours) and the mask, like the matte's
    counted = (MERGE_BYTES_PER_PIXEL + bytes_per_pixel(kinds, naive) - MATTE_BYTES_PER_PIXEL) * pixels
    print(
        f"{name}: held {peaks[name] / MiB:.1f} MiB ({peaks[name] / pixels:.0f} B/px), counted {counted / MiB:.1f} MiB"
    )
    assert peaks[name] <= counted + SLACK, (name, peaks[name] / MiB, counted / MiB)
