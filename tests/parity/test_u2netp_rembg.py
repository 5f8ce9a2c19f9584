"""u2netp mattes from the services equal rembg's own output on the same file and photos."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient
from tests.support import servers

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mattes_equal_rembg(
    tmp_path: Path, matte_server: servers.Process, photos: dict[str, Path], u2netp_file: Path
) -> None:
    home = tmp_path / "u2net"
    home.mkdir()
    shutil.copyfile(u2netp_file, home / "u2netp.onnx")  # rembg checks its MD5 and downloads nothing
    env = {**os.environ, "U2NET_HOME": str(home), "NUMBA_DISABLE_JIT": "1"}
    subprocess.run(
        [sys.executable, "-m", "tests.support.rembg_peer", str(tmp_path / "rembg"), *map(str, photos.values())],
        env=env,
        cwd=REPO,
        check=True,
        timeout=600,
    )
    with AiClient(app_id="tests", target=matte_server.address) as ai:
        for name, path in photos.items():
            ours = np.asarray(Image.open(io.BytesIO(ai.remove_background(path).matte_png)))
            theirs = np.asarray(Image.open(tmp_path / "rembg" / f"{Path(name).stem}.png"))
            assert ours.shape == theirs.shape, name
            diff = np.abs(ours.astype(int) - theirs)
            assert diff.max() == 0, (name, diff.max(), diff.mean())
