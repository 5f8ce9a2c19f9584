"""A synthetic matting case with a known answer: a foreground, a background and an alpha with
hair-like strands, composited as a camera would record them (8-bit). For foreground estimation:
tests/parity/test_foreground_pymatting.py and tools/bench/matte_outputs.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFilter

F32 = npt.NDArray[np.float32]
SUPERSAMPLE = 4


def hair_alpha(height: int, width: int, seed: int = 0, strands: int = 150) -> F32:
    """A head (a solid ellipse) with `strands` random curved strands 1–3 px wide and of partial
    opacity, drawn 4x larger and box-reduced (antialiased edges), in 8-bit steps, [0, 1]."""
    rng = np.random.default_rng(seed)
    s = SUPERSAMPLE
    canvas = Image.new("L", (width * s, height * s), 0)
    draw = ImageDraw.Draw(canvas)
    draw.ellipse([width * s * 0.3, height * s * 0.35, width * s * 0.7, height * s * 1.1], fill=255)
    step = s * 3 * max(width, height) / 640
    for _ in range(strands):
        x, y = rng.uniform(0.3, 0.7) * width * s, rng.uniform(0.35, 0.6) * height * s
        angle = rng.uniform(-np.pi, 0)
        points = [(x, y)]
        for _ in range(30):
            angle += rng.normal(0, 0.15)
            x, y = x + np.cos(angle) * step, y + np.sin(angle) * step
            points.append((x, y))
        draw.line(points, fill=int(rng.uniform(120, 255)), width=int(rng.integers(1, 4)))
    reduced = np.asarray(canvas.resize((width, height), Image.Resampling.BOX), dtype=np.float32)
    return reduced / np.float32(255.0)


@dataclass(frozen=True)
class Case:
    image: F32  # (H, W, 3) the composite, in 8-bit steps, [0, 1]
    alpha: F32  # (H, W)
    foreground: F32  # (H, W, 3) the true foreground
    background: F32

    @property
    def partial(self) -> npt.NDArray[np.bool_]:
        """The pixels where the answer is neither the picture (alpha 1) nor invisible (alpha 0)."""
        return (self.alpha > 0) & (self.alpha < 1)

    def error(self, estimate: F32) -> float:
        """Mean |alpha (F_estimated - F)| over the partial pixels, in 8-bit levels: what the cutout
        shows wrong (the naive cutout's F is the picture itself)."""
        visible = np.abs(estimate - self.foreground) * self.alpha[:, :, None]
        return float(visible[self.partial].mean() * 255.0)


def case(foreground: Image.Image, background: Image.Image, width: int, height: int, seed: int = 0) -> Case:
    """Fur-coloured foreground (the first photo, blurred: hair colour varies slowly), a sharp
    background (the second photo), hair alpha; the composite quantised to 8 bits as a file is."""
    fg = foreground.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
    fg = fg.filter(ImageFilter.GaussianBlur(max(width, height) / 160))
    bg = background.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
    f = np.asarray(fg, dtype=np.float32) / np.float32(255.0)
    b = np.asarray(bg, dtype=np.float32) / np.float32(255.0)
    alpha = hair_alpha(height, width, seed)
    a = alpha[:, :, None]
    image = np.round((a * f + (1 - a) * b) * 255.0) / np.float32(255.0)
    return Case(image.astype(np.float32), alpha, f, b)
