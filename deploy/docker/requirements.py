#!/usr/bin/env python3
"""Print the third-party requirements of some craft-ai packages, one per line (used by the Dockerfiles).

    python3 requirements.py ROOT 'craftai-prepare[convert]' 'craftai-infer[onnx-cpu,torch]'

ROOT holds the packages' pyproject.toml files at their repository paths. The project's own packages
(craftai, craftai-common, ...) are followed through their dependencies and extras but not printed:
the images install them from wheels built from the sources. Reading only the pyproject files lets
the dependency layer of an image be cached until a dependency list changes, not on every code edit.
Standard library only: it runs in the bare base image before any virtual environment exists.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

PACKAGES = (
    "clients/wire",
    "clients/python",
    "services/common",
    "services/models",
    "services/catalogue",
    "services/prepare",
    "services/infer",
)
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(requirement: str) -> tuple[str, set[str], str]:
    """(canonical name, extras, the rest: version specifiers and markers)."""
    match = REQUIREMENT.match(requirement)
    if match is None:
        raise SystemExit(f"cannot read the requirement {requirement!r}")
    extras = {canonical(e) for e in (match.group(2) or "").split(",") if e.strip()}
    return canonical(match.group(1)), extras, match.group(3).strip()


def third_party(root: Path, wanted: list[str]) -> list[str]:
    projects: dict[str, dict[str, Any]] = {}
    for folder in PACKAGES:
        data = tomllib.loads((root / folder / "pyproject.toml").read_text())["project"]
        projects[canonical(data["name"])] = data
    done: set[tuple[str, str]] = set()  # (package, "") for its dependencies, (package, extra) for an extra
    found: set[str] = set()
    todo = [parse(w)[:2] for w in wanted]
    while todo:
        name, extras = todo.pop()
        if name not in projects:
            raise SystemExit(f"{name} is not one of this repository's packages")
        optional: dict[str, list[str]] = projects[name].get("optional-dependencies", {})
        lines: list[str] = []
        for part in ("", *sorted(extras)):
            if (name, part) in done:
                continue
            done.add((name, part))
            if part and part not in optional:
                raise SystemExit(f"{name} has no extra {part!r}")
            lines += optional[part] if part else projects[name].get("dependencies", [])
        for line in lines:
            dep, dep_extras, rest = parse(line)
            if dep in projects:
                todo.append((dep, dep_extras))
            else:
                found.add(dep + (f"[{','.join(sorted(dep_extras))}]" if dep_extras else "") + rest)
    return sorted(found)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    for line in third_party(Path(argv[0]), argv[1:]):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
