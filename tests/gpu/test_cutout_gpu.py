"""A cutout's refinement on the GPU (pipelines/cutout_merge.py `refined` on the device of the SAM
route, as features/cutout.py runs it) against the same on the CPU, on two composed photos with
hand-made keep and remove regions (the rule is the same whatever found the regions).

GPU only (CI has none and skips them with a reason); run on the lent GPU machine with
`bash tools/gpu/run_tests.sh tests/gpu/test_cutout_gpu.py`. The merge is the guided filter (its box
means in float64 on both devices) and float32 max/min: its bytes may differ only where float32
rounds the other way at a half level (MOST_APART pixels, one level). The colours estimated again
follow test_matte_outputs_gpu.py's bounds (FG_MEAN, FG_MAX) on the changed pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai_infer.pipelines import cutout_merge
from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_spec import OutputsSpec, Solid
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx

pytestmark = [pytest.mark.gpu]
MOST_APART = 1e-4  # of the picture's pixels, one level each at most
FG_MEAN = 0.05
FG_MAX = 2


@pytest.mark.parametrize(("base", "other"), [("astronaut.png", "coffee.png"), ("chelsea.png", "rocket.jpg")])
def test_a_refinement_on_cuda_is_the_cpus(photos: dict[str, Path], u2netp_file: Path, base: str, other: str) -> None:
    picture = Image.open(photos[base]).convert("RGB")
    w, h = picture.size
    picture.paste(Image.open(photos[other]).convert("RGB").resize((w // 3, h // 3)), (w - w // 3 - 8, h - h // 3 - 8))
    pixels = np.array(picture)
    (matte,) = U2netpOnnx(RouteFiles({"network": u2netp_file}, None, 4), "cpu").matte([pixels])
    matte = np.array(matte)
    colours = render(pixels, matte, OutputsSpec(frozenset({"cutout"})), "cpu").cutout
    assert colours is not None
    keep = np.zeros((h, w), dtype=np.bool_)
    keep[h - h // 3 - 10 : h - 6, w - w // 3 - 10 : w - 6] = True
    yy, xx = np.mgrid[:h, :w]
    remove = (yy - h * 0.5) ** 2 + (xx - w * 0.1) ** 2 < (w * 0.08) ** 2
    spec = OutputsSpec(frozenset({"matte", "cutout", "composite"}), False, Solid((38, 92, 200, 255)))
    regions = [(True, keep), (False, remove)]
    known = np.ascontiguousarray(colours[:, :, :3])
    cpu, cpu_changed = cutout_merge.refined(pixels, matte, known, spec, regions, device="cpu")
    cuda, cuda_changed = cutout_merge.refined(pixels, matte, known, spec, regions, device="cuda")
    assert cpu.matte is not None and cuda.matte is not None and cpu.cutout is not None and cuda.cutout is not None
    apart = cpu.matte.astype(np.int16) - cuda.matte
    print(f"{base}: changed {cpu_changed} (cuda {cuda_changed}); matte bytes apart: {(apart != 0).sum()}")
    assert np.abs(apart).max() <= 1 and (apart != 0).mean() <= MOST_APART
    assert abs(cpu_changed - cuda_changed) <= (apart != 0).sum() and cpu_changed > 0
    visible = (cpu.matte > 0) & (apart == 0)
    colour = np.abs(cpu.cutout[:, :, :3].astype(np.int16) - cuda.cutout[:, :, :3])[visible]
    print(f"{base}: colours apart, mean {colour.mean():.4f}, max {colour.max()}")
    assert colour.mean() <= FG_MEAN and colour.max() <= FG_MAX
