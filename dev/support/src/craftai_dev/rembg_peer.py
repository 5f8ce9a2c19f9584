"""Run rembg's own code on pictures (a separate process: rembg is a test-only reference).

    NUMBA_DISABLE_JIT=1 U2NET_HOME=DIR python -m craftai_dev.rembg_peer [--model NAME] OUT PICTURE...

Writes OUT/<stem>.png, the mask rembg's `remove(only_mask=True)` gives with its session of the model
NAME (u2netp unless named), which reads DIR/NAME.onnx (rembg looks there before downloading).
NUMBA_DISABLE_JIT=1 only skips compiling pymatting (alpha matting, imported by rembg but never
called on this path) at import; it changes nothing rembg computes here.

`mattes` runs it from a test: the model's file put in a rembg home of its own, the masks read back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[4]  # dev/support/src/craftai_dev/rembg_peer.py


def mattes(model: str, file: Path, pictures: Mapping[str, Path], work: Path) -> dict[str, npt.NDArray[np.uint8]]:
    """rembg's `remove(only_mask=True)` of each picture (by name) with its session of `model` reading
    `file`, in a process of its own; `work` is an empty folder for its home and its output."""
    from PIL import Image

    home = work / "home"
    home.mkdir(parents=True)
    (home / f"{model}.onnx").symlink_to(file.resolve())  # rembg takes a model already in its home folder
    env = {**os.environ, "U2NET_HOME": str(home), "NUMBA_DISABLE_JIT": "1"}
    command = [sys.executable, "-m", "craftai_dev.rembg_peer", "--model", model, str(work / "out")]
    subprocess.run([*command, *map(str, pictures.values())], env=env, cwd=REPO, check=True, timeout=600)
    return {name: np.asarray(Image.open(work / "out" / f"{Path(name).stem}.png")) for name in pictures}


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
