"""Test catalogues: the real recipe data with sources (or pins) replaced, written as TOML."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from craftai_catalogue.recipes import DATA_FILE
from craftai_dev.files import sha256_of


def real_data() -> dict[str, Any]:
    return tomllib.loads(DATA_FILE.read_text())


def recipe(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in data["recipes"] if r["name"] == name)


def pin_files(
    data: dict[str, Any],
    recipe_name: str,
    made: Mapping[str, Path],
    url: str,
    settings: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Pin each of the recipe's files whose role is in `made` to that file (its size and SHA-256),
    fetched from `url` under its published name (a loopback server of the tests); `settings`: the
    settings a role's file gets instead of the recipe's."""
    for pinned in recipe(data, recipe_name)["files"]:
        path = made.get(pinned["role"])
        if path is None:
            continue
        pinned.update(size=path.stat().st_size, sha256=sha256_of(path), sources=[{"url": f"{url}/{pinned['name']}"}])
        if settings is not None and pinned["role"] in settings:
            pinned["settings"] = dict(settings[pinned["role"]])


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(tomli_w.dumps(data))
    return path


def with_sources(path: Path, recipe_name: str, sources: list[dict[str, str]]) -> Path:
    """The real data, with every file of one recipe fetched from `sources`."""
    data = real_data()
    for pinned in recipe(data, recipe_name)["files"]:
        pinned["sources"] = sources
    return write(path, data)


def without_preparation(data: dict[str, Any], recipe_name: str, engine: str) -> dict[str, Any]:
    """`data` with one route set up from its downloaded files alone: for a test of the downloads
    whose files are stand-in bytes, which a preparation would refuse as not the network."""
    route = next(r for r in recipe(data, recipe_name)["routes"] if r["engine"] == engine)
    for key in ("needs_preparation", "revision", "checked_against"):
        route.pop(key, None)
    return data


UNCONFIRMED = "sam2.1-hiera-unconfirmed"


def add_unconfirmed(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with one more image.segment recipe whose bytes are not confirmed (as SAM 2.1 tiny was
    until issue 15): listed, and refused as unavailable with its reason."""
    base = recipe(data, "sam2.1-hiera-tiny")
    data["recipes"].append(
        {key: value for key, value in base.items() if key != "files"}
        | {
            "name": UNCONFIRMED,
            "title": "SAM 2.1 hiera tiny, unconfirmed (a test recipe)",
            "available": False,
            "unavailable_reason": "its bytes have no confirmed size or SHA-256 (a test recipe)",
        }
    )
    return data
