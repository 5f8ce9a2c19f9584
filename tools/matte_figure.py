"""The before/after picture of docs/API.md and the README, made from a public-domain sample photo
(craftai_dev.samples) by the u2netp route and the outputs pipeline as the service runs them (CPU).

    .venv/bin/python -m tools.matte_figure [--photo chelsea.png] [--out docs/images/matte-outputs.jpg]

Top row: the photo, the matte, the naive cutout and the cutout with foreground colour estimation,
both over the same blue, and a composite over the photo blurred. Bottom row: one window of the
subject's edge enlarged (chosen by the script: of the windows holding both subject and background,
the one where the two cutouts differ most), the photo, naive and estimated: the naive cutout keeps
the old background's colour in the fur where the matte is partial; the estimate gives the fur its
own colour.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from craftai_infer.pipelines.matte_outputs import render
from craftai_infer.pipelines.matte_spec import Blur, OutputsSpec, Solid
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx

REPO = Path(__file__).resolve().parents[1]

BLUE = (38, 92, 200, 255)
TILE = 200  # height of each picture of the top row
LABEL = 22


def _labelled(picture: Image.Image, text: str) -> Image.Image:
    out = Image.new("RGB", (picture.width, picture.height + LABEL), (255, 255, 255))
    out.paste(picture.convert("RGB"), (0, LABEL))
    ImageDraw.Draw(out).text((6, 5), text, fill=(20, 20, 20))
    return out


def _row(pictures: list[Image.Image], gap: int = 8) -> Image.Image:
    width = sum(p.width for p in pictures) + gap * (len(pictures) - 1)
    out = Image.new("RGB", (width, max(p.height for p in pictures)), (255, 255, 255))
    x = 0
    for picture in pictures:
        out.paste(picture, (x, 0))
        x += picture.width + gap
    return out


def figure(photo: Path, model: Path) -> Image.Image:
    picture = np.array(Image.open(photo).convert("RGB"))
    (matte,) = U2netpOnnx(RouteFiles({"network": model}, None, 0), "cpu").matte([picture])
    solid = Solid(BLUE)
    naive = render(picture, matte, OutputsSpec(frozenset({"composite"}), True, solid), "cpu").composite
    estimated = render(picture, matte, OutputsSpec(frozenset({"composite"}), False, solid), "cpu").composite
    blurred = render(picture, matte, OutputsSpec(frozenset({"composite"}), False, Blur(8.0)), "cpu").composite
    assert naive is not None and estimated is not None and blurred is not None
    h, w = matte.shape
    scale = TILE / h

    def tile(pixels: np.ndarray) -> Image.Image:
        return Image.fromarray(pixels).resize((round(w * scale), TILE), Image.Resampling.LANCZOS)

    top = _row(
        [
            _labelled(tile(picture), "photo"),
            _labelled(tile(matte), "matte"),
            _labelled(tile(naive), "naive cutout over blue"),
            _labelled(tile(estimated), "cutout, colours estimated"),
            _labelled(tile(blurred), "composite over a blur"),
        ]
    )
    # Of the windows on the subject's edge (holding both subject, matte >= 250, and background,
    # matte <= 5), the one where the two cutouts differ most: where the old background showed through.
    side = h // 4
    change = np.abs(naive.astype(np.float32) - estimated).sum(axis=2)
    best, corner = -1.0, (0, 0)
    for y in range(0, h - side + 1, side // 6):
        for x in range(0, w - side + 1, side // 6):
            window = matte[y : y + side, x : x + side]
            found = float(change[y : y + side, x : x + side].mean())
            if window.max() >= 250 and window.min() <= 5 and found > best:
                best, corner = found, (y, x)
    y, x = corner
    zoom = (top.width - 16) // 3

    def crop(pixels: np.ndarray) -> Image.Image:
        return Image.fromarray(pixels[y : y + side, x : x + side]).resize((zoom, zoom), Image.Resampling.NEAREST)

    times = zoom // side
    bottom = _row(
        [
            _labelled(crop(picture), f"the photo (x{times})"),
            _labelled(crop(naive), f"naive: the old background shows through (x{times})"),
            _labelled(crop(estimated), f"colours estimated (multi-level, Germer et al. 2020) (x{times})"),
        ]
    )
    out = Image.new("RGB", (top.width, top.height + bottom.height + 8), (255, 255, 255))
    out.paste(top, (0, 0))
    out.paste(bottom, (0, top.height + 8))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photo", default="chelsea.png")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "matte-outputs.jpg")
    options = parser.parse_args()
    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos

    made = figure(photos()[options.photo], u2netp_onnx())
    options.out.parent.mkdir(parents=True, exist_ok=True)
    made.save(options.out, format="JPEG", quality=85, optimize=True)
    print(f"{options.out}: {made.width}x{made.height}, {options.out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
