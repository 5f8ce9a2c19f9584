"""The wheelhouse: every wheel the images install, so that `docker build` needs no index.

    .cache/docker/wheelhouse/deps/     third-party wheels (cp311, manylinux for glibc 2.36 = bookworm),
                                        the local CPU torch wheel, setuptools and wheel (to build the
                                        project's wheels offline); the WHEELHOUSE build arg points here
    .cache/docker/wheelhouse/project/  the seven project packages built as wheels

The dependency set is what deploy/docker/requirements.py reads from the pyproject files, with the
versions of constraints.txt; it is downloaded again only when those files change. The project
wheels are rebuilt when their sources change. Installing on a host with no index:
    pip install --no-index --find-links .cache/docker/wheelhouse/deps \
        --find-links .cache/docker/wheelhouse/project 'craftai[server]'
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.docker import CACHE, REPO

WHEELHOUSE = CACHE / "wheelhouse"
DEPS = WHEELHOUSE / "deps"
PROJECT = WHEELHOUSE / "project"
PACKAGES = (
    "clients/wire",
    "clients/python",
    "services/common",
    "services/models",
    "services/catalogue",
    "services/prepare",
    "services/infer",
)
# Every package with every extra a CPU image installs.
ROOTS = ("craftai[server]", "craftai-prepare[convert]", "craftai-infer[onnx-cpu,torch]")
BUILD_TOOLS = ("setuptools>=69", "wheel")  # the build-system requirement of the seven packages
# The images' interpreter and C library: Debian bookworm's CPython 3.11 and glibc 2.36. Every older
# manylinux tag is listed too (pip before 24 does not widen a --platform tag to older glibc versions).
GLIBC_MINOR = 36
PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
TARGET = (
    *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
    *("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"),
)
FORMAT = "1"  # bump when the layout or the download options change


def _digest(paths: list[Path], *extra: str) -> str:
    digest = hashlib.sha256()
    for item in extra:
        digest.update(item.encode() + b"\0")
    for path in sorted(paths):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def source_files(folder: Path) -> list[Path]:
    """A package's sources as the Dockerfiles see them (caches and build output left out)."""
    skip = {"__pycache__", "build", "dist"}
    return [
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not skip.intersection(p.relative_to(folder).parts)
        and not any(part.endswith(".egg-info") for part in p.parts)
        and p.suffix != ".pyc"
    ]


def deps_digest() -> str:
    files = [REPO / "constraints.txt", REPO / "deploy/docker/requirements.py"]
    files += [REPO / package / "pyproject.toml" for package in PACKAGES]
    return _digest(files, FORMAT, *ROOTS, *TARGET)


def project_digest() -> str:
    return _digest([f for package in PACKAGES for f in source_files(REPO / package)], FORMAT)


def _pinned(name: str) -> str:
    for line in (REPO / "constraints.txt").read_text().splitlines():
        match = re.match(rf"^{re.escape(name)}==(\S+)", line.strip())
        if match:
            return match.group(1)
    raise SystemExit(f"constraints.txt pins no version of {name}")


def _find_links() -> list[Path]:
    """Folders pip is configured to find wheels in (PIP_FIND_LINKS, pip config)."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            folders += value.strip().strip("'\"").split()
    return [Path(f.removeprefix("file://")) for f in folders if f]


def torch_wheel() -> Path:
    """The CPU build of the pinned torch: CRAFTAI_TORCH_WHEEL, else a pip find-links folder.

    PyPI's Linux torch is the CUDA build (several GB with its nvidia-* wheels), so it is never
    downloaded by accident: without a local CPU wheel the wheelhouse is refused.
    """
    explicit = os.environ.get("CRAFTAI_TORCH_WHEEL")
    if explicit:
        return Path(explicit)
    version = _pinned("torch")
    for folder in _find_links():
        found = sorted(folder.glob(f"torch-{version}+cpu-cp311-cp311-*manylinux*_x86_64.whl"))
        if found:
            return found[-1]
    raise SystemExit(
        f"no CPU wheel of torch {version} (torch-{version}+cpu-cp311-...whl) in pip's find-links folders; "
        "set CRAFTAI_TORCH_WHEEL to its path"
    )


def _pip(args: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    subprocess.run(command, check=True)


def _stamp_ok(folder: Path, digest: str) -> bool:
    stamp = folder / ".inputs"
    return stamp.is_file() and stamp.read_text().strip() == digest


def _summary() -> str:
    """The third-party wheels' count and size: printed on every run, so that the build's log (CI's
    included) has the figures docs/DEPLOY.md does not keep."""
    wheels = list(DEPS.glob("*.whl"))
    return f"{len(wheels)} wheels, {sum(p.stat().st_size for p in wheels) / 1e6:.0f} MB"


def ensure_deps(*, force: bool = False) -> Path:
    digest = deps_digest()
    if _stamp_ok(DEPS, digest) and not force:
        print(f"== wheelhouse: {_summary()} (up to date)", flush=True)
        return DEPS
    started = time.monotonic()
    print(f"== wheelhouse: third-party wheels into {DEPS.relative_to(REPO)}", flush=True)
    listed = subprocess.run(
        [sys.executable, str(REPO / "deploy/docker/requirements.py"), str(REPO), *ROOTS],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    torch = torch_wheel()
    requirements = [str(torch) if re.match(r"^torch\b", r) else r for r in listed]
    fresh = DEPS.with_name("deps.partial")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    _pip(
        [
            "download",
            "-q",
            "--only-binary=:all:",
            *TARGET,
            "-c",
            str(REPO / "constraints.txt"),
            "-d",
            str(fresh),
            *requirements,
            *BUILD_TOOLS,
        ]
    )
    (fresh / ".inputs").write_text(digest + "\n")
    shutil.rmtree(DEPS, ignore_errors=True)
    fresh.rename(DEPS)
    print(f"== wheelhouse: {_summary()} in {time.monotonic() - started:.0f} s", flush=True)
    return DEPS


def ensure_project(*, force: bool = False) -> Path:
    """The seven project wheels, built offline (setuptools from the wheelhouse)."""
    digest = project_digest()
    if _stamp_ok(PROJECT, digest) and not force:
        return PROJECT
    shutil.rmtree(PROJECT, ignore_errors=True)
    PROJECT.mkdir(parents=True)
    # One build environment with the wheelhouse's setuptools for the seven packages: a seventh of the
    # time of pip's isolated build per package, and no index needed.
    env = CACHE / "build-env"
    python = env / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    offline = ["--no-index", "--find-links", str(DEPS)]
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", *offline, *BUILD_TOOLS], check=True)
    command = [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", *offline]
    # setuptools builds in the source folder (build/, *.egg-info): build from a copy, so that the
    # checkout stays as it was (mypy and ruff would find the copies under build/).
    with tempfile.TemporaryDirectory(prefix="craftai-wheels-") as tmp:
        ignore = shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info", "*.pyc")
        copies = [shutil.copytree(REPO / p, Path(tmp) / p, ignore=ignore) for p in PACKAGES]
        subprocess.run([*command, "-w", str(PROJECT), *map(str, copies)], check=True)
    (PROJECT / ".inputs").write_text(digest + "\n")
    print(f"== wheelhouse: project wheels {sorted(p.name for p in PROJECT.glob('*.whl'))}", flush=True)
    return PROJECT


def ensure_wheelhouse(*, force: bool = False) -> Path:
    """Both halves; returns the folder the Dockerfiles take as WHEELHOUSE."""
    ensure_deps(force=force)
    ensure_project(force=force)
    return DEPS
