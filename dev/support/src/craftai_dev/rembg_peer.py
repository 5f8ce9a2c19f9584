"""Run rembg's own code on pictures (a separate process: rembg is a test-only reference).

    NUMBA_DISABLE_JIT=1 U2NET_HOME=DIR python -m craftai_dev.rembg_peer [--model NAME] OUT PICTURE...

Writes OUT/<stem>.png, the mask rembg's `remove(only_mask=True)` gives with its session of the model
NAME (u2netp unless named), which reads DIR/NAME.onnx (rembg looks there before downloading).
NUMBA_DISABLE_JIT=1 only skips compiling pymatting (alpha matting, imported by rembg but never
called on this path) at import; it changes nothing rembg computes here.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from PIL import Image
    from rembg import new_session, remove

    model = "u2netp"
    if argv[:1] == ["--model"]:
        model, argv = argv[1], argv[2:]
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    session = new_session(model)
    for name in argv[1:]:
        mask = remove(Image.open(name), session=session, only_mask=True)
        mask.save(out / f"{Path(name).stem}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
