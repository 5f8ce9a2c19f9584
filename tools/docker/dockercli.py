"""Small helpers around the `docker` command line (the engine's CLI, whatever its version)."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def docker(args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=check, capture_output=True, text=True)


def docker_json(args: list[str]) -> Any:
    return json.loads(docker(args).stdout)


def image_exists(tag: str) -> bool:
    return docker(["image", "inspect", tag], check=False).returncode == 0


def image_label(tag: str, label: str) -> str | None:
    """A label of a local image, or None when the image (or the label) is not there."""
    done = docker(["image", "inspect", "--format", "{{json .Config.Labels}}", tag], check=False)
    if done.returncode != 0:
        return None
    labels = json.loads(done.stdout) or {}
    value = labels.get(label)
    return str(value) if value is not None else None


def engine_answers() -> bool:
    try:
        return docker(["info"], check=False).returncode == 0
    except FileNotFoundError:
        return False
