"""Build the container images here, with no image registry: a local Debian base image, a wheelhouse,
then the Dockerfiles of deploy/docker (docs/DEPLOY.md).

    python -m tools.docker              # base image, wheelhouse, the CPU images (each step skipped when current)
    python -m tools.docker --force      # rebuild everything

Everything is cached under <repo>/.cache/docker/ and in the Docker engine, keyed by digests of the
inputs, so a second run with nothing changed only compares digests.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "docker"
