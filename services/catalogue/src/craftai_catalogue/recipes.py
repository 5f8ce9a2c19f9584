"""The recipe data: typed, validated when the catalogue starts, and turned into protobuf.

A broken data file stops the service with a message naming the entry (`CatalogueDataError`).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Annotated, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from craftai_wire.v1 import catalogue_pb2
from craftai_wire.vocabulary import Engine

DATA_FILE = Path(__file__).parent / "data" / "recipes.toml"
# onnxruntime and torch (docs/API.md, Engine advice); openvino runs a published .onnx file on the CPU, opt-in
# (u2netp: named by the caller, never advised: its matte is within 1/255 of rembg's, not identical).
ENGINES: tuple[Engine, ...] = tuple(Engine)
NAME = r"^[a-z0-9][a-z0-9._-]*$"
SHA256 = r"^[0-9a-f]{64}$"


class CatalogueDataError(ValueError):
    """The recipe data is broken; the message names the entry."""


class _Model(BaseModel):
    # An engine is checked against the vocabulary's names and kept as its plain string.
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=True)


class UrlSource(_Model):
    url: Annotated[str, Field(pattern=r"^https?://")]


class WheelSource(_Model):
    wheel: Annotated[str, Field(min_length=3, description="a pip requirement pinned with ==")]
    member: Annotated[str, Field(min_length=1)]

    @model_validator(mode="after")
    def _pinned(self) -> Self:
        if "==" not in self.wheel:
            raise ValueError(f"wheel source {self.wheel!r} must pin one version with ==")
        return self


class ArchiveSource(_Model):
    """A member of a zip archive at a URL; the archive is pinned by its own size and SHA-256. The
    member is found by the pinned file's size and SHA-256; `member` is where it is expected."""

    archive: Annotated[str, Field(pattern=r"^https?://")]
    archive_size: Annotated[int, Field(gt=0)]
    archive_sha256: Annotated[str, Field(pattern=SHA256)]
    member: str = ""

    @model_validator(mode="after")
    def _zip(self) -> Self:
        if not PurePosixPath(urlsplit(self.archive).path).name.endswith(".zip"):
            raise ValueError(f"archive source {self.archive!r} must name a .zip file")
        return self


class PinnedFileSpec(_Model):
    folder: Annotated[str, Field(pattern=NAME)]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    role: str = ""
    engines: list[Engine] = []  # the routes that use the file; empty: every route
    size: Annotated[int, Field(gt=0)]
    sha256: Annotated[str, Field(pattern=SHA256)]
    sources: Annotated[list[UrlSource | WheelSource | ArchiveSource], Field(min_length=1)]
    # What a route's preparation needs to know to read the bytes right (e.g. patch_order); the
    # converter that reads the file checks the values.
    settings: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")], str] = {}


class RouteSpec(_Model):
    engine: Engine
    needs_preparation: bool = False
    quick_on_cpu: bool = False
    prefer_on_gpu: bool = False
    revision: str = ""
    description: str = ""
    # Names of the recipe's files of other routes that the preparation checks itself against when
    # they are on disk (never fetched for this route).
    checked_against: list[str] = []

    @model_validator(mode="after")
    def _revision(self) -> Self:
        if self.needs_preparation and not re.match(NAME, self.revision):
            raise ValueError(f"route {self.engine!r} needs preparation, so it needs a revision")
        if not self.needs_preparation and self.revision:
            raise ValueError(f"route {self.engine!r} has a revision but needs no preparation")
        if self.checked_against and not self.needs_preparation:
            raise ValueError(f"route {self.engine!r} is checked against files but has no preparation to check")
        return self


class RecipeSpec(_Model):
    name: Annotated[str, Field(pattern=NAME)]
    feature: str
    title: str
    network: str
    license: str
    available: bool = True
    unavailable_reason: str = ""
    files: list[PinnedFileSpec] = []
    routes: Annotated[list[RouteSpec], Field(min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.available and not self.files:
            raise ValueError("an available recipe must pin at least one file")
        if not self.available and not self.unavailable_reason:
            raise ValueError("an unavailable recipe must say why (unavailable_reason)")
        engines = [r.engine for r in self.routes]
        if len(set(engines)) != len(engines):
            raise ValueError(f"engines listed twice: {engines}")
        names = [(f.folder, f.name) for f in self.files]
        if len(set(names)) != len(names):
            raise ValueError("a file is pinned twice")
        for f in self.files:
            unknown = sorted(set(f.engines) - set(engines))
            if unknown:
                raise ValueError(f"file {f.name!r} names engines the recipe has no route for: {unknown}")
        if self.available:
            bare = [e for e in engines if not self.files_of(e)]
            if bare:
                raise ValueError(f"routes {bare} use none of the recipe's files")
        for route in self.routes:
            own = {f.name for f in self.files_of(route.engine)}
            for name in route.checked_against:
                if name not in {f.name for f in self.files} or name in own:
                    raise ValueError(
                        f"route {route.engine!r} is checked against {name!r}, "
                        "which is not a file of the recipe's other routes"
                    )
        return self

    def route(self, engine: str) -> RouteSpec | None:
        return next((r for r in self.routes if r.engine == engine), None)

    def files_of(self, engine: str) -> list[PinnedFileSpec]:
        """The files the route of `engine` uses (those naming no engine are every route's)."""
        return [f for f in self.files if not f.engines or engine in f.engines]

    def checked_against(self, engine: str) -> list[PinnedFileSpec]:
        """The files of other routes that the preparation of the route of `engine` checks itself against."""
        route = self.route(engine)
        names = route.checked_against if route is not None else []
        return [f for f in self.files if f.name in names]


class FeatureSpec(_Model):
    name: Annotated[str, Field(pattern=r"^[a-z]+\.[a-z]+$")]
    title: str
    description: str
    default_recipe_gpu: str
    default_recipe_cpu: str


class CatalogueData(_Model):
    features: Annotated[list[FeatureSpec], Field(min_length=1)]
    recipes: Annotated[list[RecipeSpec], Field(min_length=1)]
    revision: str = ""

    def feature(self, name: str) -> FeatureSpec | None:
        return next((f for f in self.features if f.name == name), None)

    def recipes_of(self, feature: str) -> Iterator[RecipeSpec]:
        return (r for r in self.recipes if r.feature == feature)

    def recipe(self, feature: str, name: str) -> RecipeSpec | None:
        return next((r for r in self.recipes_of(feature) if r.name == name), None)


def _entry_name(data: dict[str, object], loc: tuple[int | str, ...]) -> str:
    """Turn a pydantic location like ('recipes', 2, 'files', 0, 'sha256') into words."""
    parts: list[str] = []
    node: object = data
    for key in loc:
        if isinstance(node, dict) and key in node:
            node = node[key]
            parts.append(str(key))
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
            label = node.get("name") if isinstance(node, dict) else None
            parts[-1] = f"{parts[-1]}[{label!r}]" if label else f"{parts[-1]}[{key}]"
        else:
            parts.append(str(key))
    return ".".join(parts)


def load(path: Path = DATA_FILE) -> CatalogueData:
    """Read and validate the recipe data; `CatalogueDataError` names the broken entry."""
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogueDataError(f"cannot read the recipe data {path}: {exc}") from exc
    try:
        parsed = CatalogueData.model_validate(data)
    except ValidationError as exc:
        lines = [f"{_entry_name(data, tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise CatalogueDataError(f"the recipe data {path} is broken:\n  " + "\n  ".join(lines)) from exc
    _check_references(parsed, path)
    revision = hashlib.sha256(raw).hexdigest()[:16]
    return parsed.model_copy(update={"revision": revision})


def _check_references(data: CatalogueData, path: Path) -> None:
    _check_archives(data, path)
    features = {f.name for f in data.features}
    seen: set[tuple[str, str]] = set()
    for recipe in data.recipes:
        if recipe.feature not in features:
            raise CatalogueDataError(f"{path}: recipes[{recipe.name!r}]: unknown feature {recipe.feature!r}")
        if (recipe.feature, recipe.name) in seen:
            raise CatalogueDataError(f"{path}: recipes[{recipe.name!r}]: listed twice")
        seen.add((recipe.feature, recipe.name))
    for feature in data.features:
        for default in (feature.default_recipe_gpu, feature.default_recipe_cpu):
            if data.recipe(feature.name, default) is None:
                raise CatalogueDataError(
                    f"{path}: features[{feature.name!r}]: default recipe {default!r} is not a recipe of it"
                )


def _check_archives(data: CatalogueData, path: Path) -> None:
    """An archive is one set of bytes: every source naming its URL pins the same size and SHA-256."""
    pins: dict[str, tuple[int, str]] = {}
    for recipe in data.recipes:
        for pinned in recipe.files:
            for source in pinned.sources:
                if not isinstance(source, ArchiveSource):
                    continue
                pin = (source.archive_size, source.archive_sha256)
                if pins.setdefault(source.archive, pin) != pin:
                    raise CatalogueDataError(
                        f"{path}: recipes[{recipe.name!r}].files[{pinned.name!r}]: the archive {source.archive} "
                        "is pinned elsewhere with another size or SHA-256"
                    )


# ---- protobuf -----------------------------------------------------------------------------


def source_to_proto(source: UrlSource | WheelSource | ArchiveSource) -> catalogue_pb2.Source:
    if isinstance(source, UrlSource):
        return catalogue_pb2.Source(url=source.url)
    if isinstance(source, WheelSource):
        return catalogue_pb2.Source(
            wheel_member=catalogue_pb2.WheelMember(requirement=source.wheel, member=source.member)
        )
    return catalogue_pb2.Source(
        archive_member=catalogue_pb2.ArchiveMember(
            url=source.archive,
            archive_size=source.archive_size,
            archive_sha256=source.archive_sha256,
            member=source.member,
        )
    )


def file_to_proto(f: PinnedFileSpec) -> catalogue_pb2.PinnedFile:
    return catalogue_pb2.PinnedFile(
        folder=f.folder,
        name=f.name,
        size=f.size,
        sha256=f.sha256,
        role=f.role,
        sources=[source_to_proto(s) for s in f.sources],
        engines=f.engines,
        settings=f.settings,
    )


def recipe_to_proto(recipe: RecipeSpec, engine: str = "") -> catalogue_pb2.Recipe:
    """The recipe as listed; with `engine`, as resolved for that route: only the files it uses."""
    files = [file_to_proto(f) for f in (recipe.files_of(engine) if engine else recipe.files)]
    routes = [route_to_proto(recipe, r) for r in recipe.routes]
    return catalogue_pb2.Recipe(
        name=recipe.name,
        feature=recipe.feature,
        title=recipe.title,
        network=recipe.network,
        license=recipe.license,
        files=files,
        routes=routes,
        available=recipe.available,
        unavailable_reason=recipe.unavailable_reason,
    )


def route_to_proto(recipe: RecipeSpec, route: RouteSpec) -> catalogue_pb2.Route:
    """A route of `recipe`; `download_bytes` is what setting it up fetches (`files_of` its engine),
    said here so that no client applies the files' engines rule again."""
    return catalogue_pb2.Route(
        engine=route.engine,
        needs_preparation=route.needs_preparation,
        quick_on_cpu=route.quick_on_cpu,
        revision=route.revision,
        description=route.description,
        download_bytes=sum(f.size for f in recipe.files_of(route.engine)),
    )


def feature_to_proto(data: CatalogueData, feature: FeatureSpec, *, gpu: bool = False) -> catalogue_pb2.Feature:
    return catalogue_pb2.Feature(
        name=feature.name,
        title=feature.title,
        description=feature.description,
        default_recipe=feature.default_recipe_gpu if gpu else feature.default_recipe_cpu,
        recipes=[recipe_to_proto(r) for r in data.recipes_of(feature.name)],
    )
