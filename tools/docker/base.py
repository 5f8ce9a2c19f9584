"""The local base image: Debian bookworm (minbase, python3, venv, CA certificates) made with
mmdebstrap and imported with `docker import`, because no registry can be pulled from here.

mmdebstrap (Debian's successor of debootstrap) writes the root filesystem as a tarball straight to
`docker import`, with no intermediate tree on disk, and needs about half of debootstrap's CPU time.
The Dockerfiles take it as BASE_IMAGE; elsewhere they default to python:3.11-slim-bookworm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from tools.docker.dockercli import docker_json, image_exists

BASE_TAG = "craftai-base:bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
# Documentation, manual pages and translations are not needed in a service image (copyrights stay).
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)
IMAGE_CHANGES = ("ENV LANG=C.UTF-8", 'CMD ["python3"]')


def _ensure_mmdebstrap() -> str:
    found = shutil.which("mmdebstrap")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("mmdebstrap is missing: install it (apt-get install mmdebstrap) or run as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "mmdebstrap"], check=True, env=env)
    return shutil.which("mmdebstrap") or "mmdebstrap"


def ensure_base(tag: str = BASE_TAG, *, force: bool = False) -> str:
    """The base image's tag; built when missing. CRAFTAI_BASE_IMAGE names another image to use instead."""
    override = os.environ.get("CRAFTAI_BASE_IMAGE")
    if override:
        return override
    if image_exists(tag) and not force:
        print(f"== base image {tag}: {int(docker_json(['image', 'inspect', tag])[0]['Size']) / 1e6:.0f} MB", flush=True)
        return tag
    if os.geteuid() != 0:
        raise SystemExit(f"building {tag} needs root (mmdebstrap mounts /proc and /dev in the new tree)")
    started = time.monotonic()
    command = [
        _ensure_mmdebstrap(),
        "--variant=minbase",
        "--include=" + ",".join(PACKAGES),
        *(f"--dpkgopt={option}" for option in DPKG_EXCLUDES),
        "bookworm",
        "-",  # the tarball on stdout
    ]
    mirror = os.environ.get("CRAFTAI_DEBIAN_MIRROR")
    if mirror:
        command.append(mirror)
    print(f"== base image {tag}: {' '.join(command)}", flush=True)
    importer = ["docker", "import", *(arg for change in IMAGE_CHANGES for arg in ("--change", change)), "-", tag]
    with subprocess.Popen(command, stdout=subprocess.PIPE) as tarball:
        assert tarball.stdout is not None
        imported = subprocess.run(importer, stdin=tarball.stdout, check=False, capture_output=True, text=True)
        tarball.stdout.close()
        made = tarball.wait()
    if made != 0 or imported.returncode != 0:
        raise SystemExit(f"building {tag} failed: mmdebstrap exit {made}, docker import: {imported.stderr.strip()}")
    size = int(docker_json(["image", "inspect", tag])[0]["Size"])
    print(f"== base image {tag}: {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s", flush=True)
    return tag
