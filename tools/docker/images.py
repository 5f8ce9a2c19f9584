"""Build the service images from deploy/docker with the local base image and the wheelhouse.

The engine's legacy builder is used on purpose (DOCKER_BUILDKIT=0): it is what docker-py and so
testcontainers use, so the Dockerfiles must stay free of BuildKit-only syntax. Each image carries a
label with a digest of everything its build reads; an image whose label matches is not built again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tools.docker import CACHE, REPO
from tools.docker.dockercli import docker, docker_json, image_label
from tools.docker.wheelhouse import PACKAGES, source_files

INPUTS_LABEL = "org.craftai.inputs"
LOGS = CACHE / "logs"
DOCKERFILES = REPO / "deploy" / "docker"
# Built here in this order (prepare reuses the dependency layer infer-cpu builds). infer-cuda is
# written for GPU hosts and not built here: see docs/DEPLOY.md.
LOCAL_IMAGES = ("catalogue", "infer-cpu", "prepare")


@dataclass(frozen=True)
class Built:
    name: str
    tag: str
    size: int
    seconds: float
    rebuilt: bool


def default_tag_suffix() -> str:
    """CRAFTAI_IMAGE_TAG, else `dev-` and a hash of this checkout's path: several checkouts (work
    trees, CI's clone) share one engine, and each must run the images built from its own sources."""
    return os.environ.get("CRAFTAI_IMAGE_TAG") or "dev-" + hashlib.sha256(str(REPO).encode()).hexdigest()[:8]


def tag_of(name: str, suffix: str | None = None) -> str:
    return f"craftai-{name}:{suffix or default_tag_suffix()}"


def inputs_digest(name: str, build_args: dict[str, str]) -> str:
    """Everything the build of `name` reads: its Dockerfile, the context it copies, the base image."""
    digest = hashlib.sha256()
    for key, value in sorted(build_args.items()):
        digest.update(f"{key}={value}\0".encode())
    base = build_args["BASE_IMAGE"]
    digest.update(docker(["image", "inspect", "--format", "{{.Id}}", base]).stdout.strip().encode())
    files = [REPO / "constraints.txt", REPO / ".dockerignore"]
    files += [p for p in DOCKERFILES.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += [f for package in PACKAGES for f in source_files(REPO / package)]
    wheelhouse = REPO / build_args["WHEELHOUSE"] / ".inputs"
    if wheelhouse.is_file():
        files.append(wheelhouse)
    digest.update(f"{name}\0".encode())
    for path in sorted(files):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_image(name: str, build_args: dict[str, str], *, tag: str | None = None, force: bool = False) -> Built:
    tag = tag or tag_of(name)
    digest = inputs_digest(name, build_args)
    started = time.monotonic()
    rebuilt = force or image_label(tag, INPUTS_LABEL) != digest
    if rebuilt:
        print(f"== image {tag}: building deploy/docker/{name}.Dockerfile", flush=True)
        command = ["docker", "build", "--force-rm", "-f", str(DOCKERFILES / f"{name}.Dockerfile"), "-t", tag]
        command += ["--label", f"{INPUTS_LABEL}={digest}"]
        for key, value in build_args.items():
            command += ["--build-arg", f"{key}={value}"]
        env = {**os.environ, "DOCKER_BUILDKIT": "0"}
        log = LOGS / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with (
            log.open("w") as out,
            subprocess.Popen(
                [*command, str(REPO)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ) as build,
        ):
            assert build.stdout is not None
            for line in build.stdout:  # timed, so that a slow step can be found afterwards
                out.write(f"{time.monotonic() - started:7.1f} {line}")
        if build.returncode != 0:
            tail = "".join(log.read_text().splitlines(keepends=True)[-60:])
            raise SystemExit(f"building {tag} failed (log: {log}):\n{tail}")
    size = int(docker_json(["image", "inspect", tag])[0]["Size"])
    seconds = time.monotonic() - started
    what = "built" if rebuilt else "up to date"
    print(f"== image {tag}: {what}, {size / 1e6:.0f} MB, {seconds:.0f} s", flush=True)
    return Built(name, tag, size, seconds, rebuilt)


def build_images(
    base: str, wheelhouse: Path, names: tuple[str, ...] = LOCAL_IMAGES, *, force: bool = False
) -> dict[str, Built]:
    args = {"BASE_IMAGE": base, "WHEELHOUSE": str(wheelhouse.relative_to(REPO))}
    built = {name: build_image(name, args, force=force) for name in names}
    # Images replaced by a rebuild keep their label and become dangling: drop them (never the
    # unlabelled intermediate stages, which are the builder's cache).
    docker(["image", "prune", "--force", "--filter", f"label={INPUTS_LABEL}"], check=False)
    return built
