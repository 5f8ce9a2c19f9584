"""Everything the CPU images need, in order: base image, wheelhouse, images (each skipped when current)."""

from __future__ import annotations

import time

from tools.docker.base import ensure_base
from tools.docker.dockercli import engine_answers
from tools.docker.images import LOCAL_IMAGES, Built, build_images
from tools.docker.wheelhouse import ensure_wheelhouse


def build_all(names: tuple[str, ...] = LOCAL_IMAGES, *, force: bool = False) -> dict[str, Built]:
    """Base image, wheelhouse and images, each skipped when current (also used by tests/containers)."""
    if not engine_answers():
        raise SystemExit("no Docker engine answers `docker info`: run tools/docker/engine.sh (as root)")
    started = time.monotonic()
    base = ensure_base(force=force)
    wheelhouse = ensure_wheelhouse(force=force)
    built = build_images(base, wheelhouse, names, force=force)
    print(f"== images ready in {time.monotonic() - started:.0f} s", flush=True)
    return built
