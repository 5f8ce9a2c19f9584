"""python -m tools.docker [--force] [--only NAME ...]: base image, wheelhouse, the CPU images."""

from __future__ import annotations

import argparse

from tools.docker.build import build_all
from tools.docker.images import LOCAL_IMAGES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docker", description=__doc__)
    parser.add_argument("--force", action="store_true", help="rebuild the base image, the wheelhouse and the images")
    parser.add_argument("--only", nargs="+", choices=LOCAL_IMAGES, default=list(LOCAL_IMAGES), help="images to build")
    options = parser.parse_args(argv)
    build_all(tuple(options.only), force=options.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
