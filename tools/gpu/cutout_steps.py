"""Where a cutout refinement's merge goes, step by step (issue "Fix a cutout": <= 20 ms on the
server for a 2048x1536 picture): the copies to the device, the region's feathering and the new
alpha (cutout_merge.merged), the colours estimated again on the changed pixels' box
(refreshed_colours), and the outputs made and copied back (render), each timed on its own with
the device synchronised, the pipeline's own functions called as refined() calls them.

The picture is a sample photo resized; the matte a soft ellipse; the region a keep mask of the
size asked (`--regions`, shares of the picture: 0.66 is what the cutout bench's random SAM
finds for any click, a real click's object is smaller), so that the figures can be read against
the region's size.

    python3 -m tools.gpu.cutout_steps --device cuda --out DIR        # the GPU machine
    .venv/bin/python -m tools.gpu.cutout_steps --tiny --device cpu --out DIR    # here, every part

Writes DIR/cutout_steps.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from tools.bench import harness


def _ellipse(height: int, width: int, share: float, soft: float) -> np.ndarray:
    """(H, W) float in [0, 1]: an ellipse centred in the picture covering about `share` of it,
    its edge ramped over `soft` of the radius."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    scale = np.sqrt(share / (np.pi / 4))  # the ellipse inscribed in the picture covers pi/4 of it
    r = np.sqrt(((y - height / 2) / (height / 2 * scale)) ** 2 + ((x - width / 2) / (width / 2 * scale)) ** 2)
    return np.asarray(np.clip((1.0 - r) / soft, 0.0, 1.0), dtype=np.float32)


def inputs(size: tuple[int, int], region: float) -> dict[str, Any]:
    """The picture (H, W, 3) uint8, its matte (H, W) uint8 (a soft ellipse of 0.4 of the picture,
    shifted left) and the region (H, W) bool (shifted right, so that a small one lies where the
    matte is background and the keep changes it)."""
    from craftai_dev.files import sample_photo

    width, height = size
    with Image.open(sample_photo("astronaut.png")) as photo:
        picture = np.array(photo.convert("RGB").resize((width, height), Image.Resampling.BILINEAR))
    matte = (255 * np.roll(_ellipse(height, width, 0.4, 0.1), -width // 4, axis=1)).astype(np.uint8)
    mask = np.roll(_ellipse(height, width, region, 1e-6) > 0, width // 4, axis=1)
    return {"picture": np.ascontiguousarray(picture), "matte": matte, "mask": mask}


def measure(device: str, size: tuple[int, int], region: float, repeats: int) -> dict[str, Any]:
    import torch

    from craftai_infer.pipelines import cutout_merge
    from craftai_infer.pipelines.matte_outputs import combined_alpha, cutout, render
    from craftai_infer.pipelines.matte_spec import OutputsSpec

    given = inputs(size, region)
    on = torch.device(device)
    spec = OutputsSpec(kinds=frozenset({"cutout"}))

    def sync() -> None:
        if on.type == "cuda":
            torch.cuda.synchronize(on)

    with torch.inference_mode():
        colours = cutout(torch.from_numpy(given["picture"]).to(on), torch.from_numpy(given["matte"]).to(on))
        colours_host = colours[:, :, :3].cpu().numpy()
        state: dict[str, Any] = {}

        def upload() -> None:
            state["pixels"] = torch.from_numpy(given["picture"]).to(on)
            state["before"] = torch.from_numpy(given["matte"]).to(on)
            state["region"] = cutout_merge.Region(True, torch.from_numpy(given["mask"]).to(on))
            state["colours"] = torch.from_numpy(colours_host).to(on)

        def merge() -> None:
            before = state["before"]
            radius = cutout_merge.feather_radius(*before.shape)
            state["after"] = cutout_merge.merged(before, state["pixels"][:, :, :3], [state["region"]], radius)
            state["changed"] = state["after"] != before

        def colours_again() -> None:
            alpha = combined_alpha(state["after"], state["pixels"])
            state["fresh"] = cutout_merge.refreshed_colours(
                state["pixels"][:, :, :3], alpha, state["colours"], state["changed"]
            )

        def outputs() -> None:
            state["rendered"] = render(given["picture"], state["after"], spec, device, colours=state["fresh"])

        steps: dict[str, Callable[[], None]] = {
            "upload": upload,
            "merge": merge,
            "colours": colours_again,
            "outputs": outputs,
        }
        times: dict[str, list[float]] = {name: [] for name in steps}
        for k in range(repeats + 1):  # the first round warms every step up (kernels, allocations)
            for name, step in steps.items():
                sync()
                started = time.perf_counter()
                step()
                sync()
                if k:
                    times[name].append((time.perf_counter() - started) * 1000)
        changed = int(state["changed"].sum())
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "device": str(on) if on.type == "cpu" else torch.cuda.get_device_name(on),
        "size": f"{size[0]}x{size[1]}",
        "region_share": region,
        "pixels_changed": changed,
        "repeats": repeats,
        "median_ms": {name: round(v, 2) for name, v in medians.items()},
        "total_ms": round(sum(medians.values()), 2),
    }


def report(results: dict[str, Any]) -> str:
    lines = [
        f"A cutout refinement's steps, {results['size']} on {results['device']}, medians of {results['repeats']}",
        "",
        "| region (share of the picture) | pixels changed | upload | merge | colours | outputs | total, ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        m = r["median_ms"]
        cells = [m["upload"], m["merge"], m["colours"], m["outputs"], r["total_ms"]]
        lines.append(
            f"| {r['region_share']} | {r['pixels_changed']:,} | " + " | ".join(f"{c:.1f}" for c in cells) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--regions", default="0.66,0.2,0.05", help="the keep regions' shares of the picture")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="256x192, one repeat: every part, no figure")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    size = (256, 192) if options.tiny else (2048, 1536)
    repeats = 1 if options.tiny else options.repeats
    runs = [measure(options.device, size, float(share), repeats) for share in options.regions.split(",")]
    results = {"size": runs[0]["size"], "device": runs[0]["device"], "repeats": repeats, "runs": runs}
    harness.write_report(options.out, "cutout_steps", results, report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
