"""The picture of docs/MATTE.md's "Fixing a cutout": the merge rule of pipelines/cutout_merge.py on
a composed picture, with regions drawn by hand (SAM's real weights cannot be downloaded where the
docs are built; the service takes the regions from SAM's decoder, the rule is the same).

    .venv/bin/python -m tools.cutout_figure [--out docs/images/cutout-fix.jpg]

The picture: the astronaut photo with the coffee photo pasted into its lower right corner (a second
subject, which u2netp's matte leaves out). Top row: the picture with the two regions (keep: the
pasted photo's rectangle grown by 2 pixels, so that its edge lies off the picture's edge; remove:
a disc on the flag's lower end, which the matte keeps), u2netp's matte, the matte after the keep
and the remove, the cutout over blue. Bottom row, the keep region's top right corner enlarged: the
region as drawn, after the guided filter (its edge moved onto the picture's), the merged matte.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from craftai_infer.pipelines import cutout_merge
from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_spec import OutputsSpec, Solid
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx
from tools.matte_figure import _labelled, _row

REPO = Path(__file__).resolve().parents[1]
BLUE = (38, 92, 200, 255)
TILE = 220
GROW = 2  # the keep region's edge, this far outside the pasted photo's (within the filter's radius)


def composed(base: Path, other: Path) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The base photo with the other's pasted into its lower right corner, and where (x0, y0, x1, y1)."""
    picture = Image.open(base).convert("RGB")
    w, h = picture.size
    patch = Image.open(other).convert("RGB").resize((w // 3, h // 3))
    x0, y0 = w - w // 3 - 8, h - h // 3 - 8
    picture.paste(patch, (x0, y0))
    return np.array(picture), (x0, y0, x0 + w // 3, y0 + h // 3)


def figure(base: Path, other: Path, model: Path) -> Image.Image:
    picture, (x0, y0, x1, y1) = composed(base, other)
    h, w = picture.shape[:2]
    (matte,) = U2netpOnnx(RouteFiles({"network": model}, None, 0), "cpu").matte([picture])
    keep = np.zeros((h, w), dtype=np.bool_)
    keep[y0 - GROW : y1 + GROW, x0 - GROW : x1 + GROW] = True
    yy, xx = np.mgrid[:h, :w]
    cy, cx, r = h * 0.72, w * 0.03, w * 0.07  # the flag's lower end, which the matte keeps
    remove = (yy - cy) ** 2 + (xx - cx) ** 2 < r**2
    spec = OutputsSpec(frozenset({"composite"}), False, Solid(BLUE))
    opened = render(picture, matte, spec, "cpu", colours=None)
    assert opened.composite is not None
    colours = render(picture, matte, OutputsSpec(frozenset({"cutout"})), "cpu").cutout
    assert colours is not None
    regions = [(True, keep), (False, remove)]
    fixed_spec = OutputsSpec(frozenset({"matte", "composite"}), False, Solid(BLUE))
    rendered, changed = cutout_merge.refined(
        picture, matte, np.ascontiguousarray(colours[:, :, :3]), fixed_spec, regions, device="cpu"
    )
    assert rendered.matte is not None and rendered.composite is not None and changed > 0
    radius = cutout_merge.feather_radius(h, w)
    with torch.inference_mode():
        soft = cutout_merge.feathered(torch.from_numpy(picture), torch.from_numpy(keep), radius).numpy()
    scale = TILE / h

    def tile(pixels: np.ndarray) -> Image.Image:
        return Image.fromarray(pixels).resize((round(w * scale), TILE), Image.Resampling.LANCZOS)

    marked = Image.fromarray(picture)
    draw = ImageDraw.Draw(marked)
    draw.rectangle((x0 - GROW, y0 - GROW, x1 + GROW, y1 + GROW), outline=(40, 220, 60), width=4)
    draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=(230, 40, 40), width=4)
    top = _row(
        [
            _labelled(tile(np.array(marked)), "keep (green), remove (red)"),
            _labelled(tile(matte), "the matte as opened"),
            _labelled(tile(rendered.matte), "after keep, then remove"),
            _labelled(tile(rendered.composite), "the cutout over blue"),
        ]
    )
    side = 24
    cy0, cx0 = y0 - side // 2, x1 - side // 2  # the keep region's top right corner, over the background
    zoom = (top.width - 16) // 3

    def crop(pixels: np.ndarray) -> Image.Image:
        window = pixels[cy0 : cy0 + side, cx0 : cx0 + side]
        return Image.fromarray(window).resize((zoom, zoom), Image.Resampling.NEAREST)

    times = zoom // side
    bottom = _row(
        [
            _labelled(crop(np.where(keep, 255, 0).astype(np.uint8)), f"the keep region as given (x{times})"),
            _labelled(crop((soft * 255 + 0.5).astype(np.uint8)), f"after the guided filter, r={radius} (x{times})"),
            _labelled(crop(rendered.matte), f"the merged matte (x{times})"),
        ]
    )
    out = Image.new("RGB", (top.width, top.height + bottom.height + 8), (255, 255, 255))
    out.paste(top, (0, 0))
    out.paste(bottom, (0, top.height + 8))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "cutout-fix.jpg")
    options = parser.parse_args()
    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos

    found = photos()
    made = figure(found["astronaut.png"], found["coffee.png"], u2netp_onnx())
    options.out.parent.mkdir(parents=True, exist_ok=True)
    made.save(options.out, format="JPEG", quality=85, optimize=True)
    print(f"{options.out}: {made.width}x{made.height}, {options.out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
