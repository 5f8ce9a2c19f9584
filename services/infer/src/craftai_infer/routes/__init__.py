"""What a route is: one recipe on one engine, built from its verified files, declaring what it can do.

A route is built by its factory (craftai_infer.routes.registry: (recipe, engine) -> class) from the route's files and
a device, and is called again with the CPU when the GPU fails (craftai_infer.loader). It implements
the Protocol of its feature (`MatteRoute`, `SegmentRoute`) and declares, in `capabilities`, which of
its operations take several requests in one call and how many calls may overlap. The loader and the
batcher call its operations through the `Operation` objects below, never by looking a name up: every
operation takes a list of requests and answers one result per request, in order (a route that does
not batch an operation gets lists of one).

image.segment's operations: ENCODE (pictures -> embeddings), DECODE (a call's prompts on one
embedding -> their masks; prompts with as many points share a decoder call), GRID (a batch of
the automatic mask generator's points -> the masks that pass its filters).

image.matte's one operation, MATTE, takes a `MatteJob` (a picture and the outputs asked for) and
answers `Rendered` host arrays: the route makes the mattes (`MatteRoute.matte`, on its device; a
route that computed its matte on a GPU answers it there, as a tensor), and the operation makes the
outputs from them on the route's device (craftai_infer.pipelines.matte_render), inside the same
call: batched with the mattes, on the route's worker, under the same GPU-to-CPU fallback.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from craftai_common.errors import failed_precondition
from craftai_common.store import FilePin
from craftai_infer.pipelines import matte_render
from craftai_infer.pipelines.matte_spec import Matte, OutputsSpec, Rendered
from craftai_infer.pipelines.picture import Picture
from craftai_wire.vocabulary import Reason

if TYPE_CHECKING:
    from craftai_infer.pipelines.mask_cleanup import Cleanup
    from craftai_infer.pipelines.mask_generator import Candidates, Everything
    from craftai_infer.pipelines.segment_sam import SamMasks, SamPrompt

Precision = Literal["auto", "fp32", "fp16", "bf16"]
Step = Callable[[str], None]  # a route says what it is doing while it loads (progress to the caller)


class ModelRefusedError(Exception):
    """A file passed its hash check but does not fit the network (e.g. a test pin of another file);
    answered as FAILED_PRECONDITION with this message."""


@dataclass(frozen=True)
class RouteFiles:
    """The verified files of a route, by role ("network", "encoder", "weights", ...), and how to run it."""

    by_role: dict[str, Path]
    prepared: Path | None
    cpu_threads: int
    pins: dict[str, FilePin] = field(default_factory=dict)
    gpu_precision: Precision = "auto"
    gpu_compile: bool = False  # torch.compile where a GPU route offers it (InferSettings.gpu_compile)
    cpu_spin: bool = False  # onnxruntime's CPU threads spin between runs (InferSettings.cpu_spin)
    bulk_niceness: int = 0  # bulk work's lower CPU priority (InferSettings.bulk_niceness; scheduling.roles)
    # Threads for a batch's per-picture host steps (Pillow's resizes, which release the GIL), beside
    # the route's worker, in the batch's class; owned by the loader. None: the worker runs them.
    host: Executor | None = None

    def role(self, name: str) -> Path:
        try:
            return self.by_role[name]
        except KeyError:
            raise KeyError(f"the recipe pins no file with role {name!r} (roles: {sorted(self.by_role)})") from None


R_contra = TypeVar("R_contra", contravariant=True)  # the routes an operation applies to
I = TypeVar("I")  # noqa: E741 - the request type of an operation
O = TypeVar("O")  # noqa: E741 - its result type


@dataclass(frozen=True, eq=False)
class Operation(Generic[R_contra, I, O]):
    """One thing routes of a feature do: `call(route, requests)` answers one result per request."""

    name: str  # for logs, metrics and the batcher of each operation
    call: Callable[[R_contra, Sequence[I]], list[O]]


@dataclass(frozen=True)
class Capabilities:
    """What the loader may do with a route's calls: batch some operations (requests that arrive
    together run as one call, grouped by the operation's batch key), and overlap `concurrent_runs`
    calls (1 for a GPU model, which runs one batch at a time); and what the feature may ask of it:
    `single_mask_like_meta`, a segment route that answers Meta's single-mask output (token 0);
    `pinned_pictures`, a route on a GPU that wants its pictures decoded into page-locked memory
    (craftai_infer.engines.staging: the copy is made on the CPU pool, not by the model worker);
    `grid_ahead`, how many of the automatic mask generator's batches the feature queues at once (a
    route that batches GRID takes those that wait in one call); `interactive_lane`, on the CPU, one
    more worker thread that takes interactive work only (craftai_infer.scheduling): a click runs
    beside an encoder batch rather than after it (a route whose calls may not overlap says False);
    `max_batch`, the most requests of a batched operation one call takes, where fewer than the
    loader's (Batching.max_batch): on a GPU, where a click runs after the call in flight, a long
    operation's calls are kept short."""

    batched: frozenset[Operation[Any, Any, Any]] = frozenset()
    max_batch: Mapping[Operation[Any, Any, Any], int] = field(default_factory=dict)
    concurrent_runs: int = 1
    interactive_lane: bool = True
    single_mask_like_meta: bool = False
    pinned_pictures: bool = False
    grid_ahead: int = 2


class Route(Protocol):
    """What every route has. Routes subclass their feature's Protocol explicitly to inherit the defaults."""

    device: str  # "cpu" or "cuda:N": where it runs now
    capabilities: Capabilities = Capabilities()

    def warm_up(self, step: Step) -> None:
        """Work done at load rather than on the first request (e.g. CUDA graphs captured)."""
        return None


class MatteRoute(Route, Protocol):
    """image.matte: the matte of each picture (MATTE makes the outputs from it). A route whose
    network mattes parts of the subject (craftai_wire.vocabulary.PARTS_OF) names them in `parts`
    and answers `matte_parts`; its `matte` is every part's, stacked."""

    parts: tuple[str, ...] = ()

    def matte(self, pictures: Sequence[Picture]) -> Sequence[Matte]:
        """Each picture's matte: a host array, or a tensor on `device` where it was computed there."""
        ...

    def matte_parts(self, pictures: Sequence[Picture], parts: Sequence[str | None]) -> Sequence[Matte]:
        """A route with `parts`: each picture's matte of the part asked (one of `parts`), or where
        None every part's, stacked top to bottom in `parts`' order (as tall as the picture times
        their number)."""
        raise TypeError(f"{type(self).__name__} has no parts: its matte is the whole subject's")

    def batch_key(self, picture: Picture) -> Hashable:
        """Pictures with the same key may share a call (they stack into one network input)."""
        return None

    def working_bytes(self, height: int, width: int) -> int:
        """What the route holds in host memory for a picture of this size, beyond the picture itself:
        its pre- and post-processing, and on the CPU its network's working memory (admitted with
        the request's cost before it runs: craftai_infer.memory); 0 where that is small, or in a
        GPU's memory."""
        return 0


class SegmentRoute(Route, Protocol):
    """image.segment: the image encoder once per picture, the mask decoder once per prompt (or
    once for several prompts, where the route batches)."""

    def encode(self, pictures: Sequence[Picture]) -> list[Any]:
        """Each RGB picture's embedding; it has `nbytes`, and a session keeps it."""
        ...

    def decode(self, requests: Sequence[DecodeRequest]) -> list[list[SamMasks]]:
        """Per request, per prompt in its order: masks at the picture's size, best first."""
        ...

    def grid(self, requests: Sequence[GridRequest]) -> list[Candidates]:
        """Per request, the masks of its points that pass the automatic mask generator's filters
        (craftai_infer.pipelines.mask_generator, steps 2-3)."""
        ...


@dataclass(frozen=True, eq=False)
class DecodeRequest:
    """Prompts on one embedding (one call of Segment: one object or several); `all_masks[i]` asks
    prompt i's three candidates rather than its best; `cleanup` is Meta's optional clean-up of
    small holes and islands (None: off)."""

    embedding: Any
    prompts: tuple[SamPrompt, ...]
    all_masks: tuple[bool, ...]
    cleanup: Cleanup | None = None

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.all_masks) or not self.prompts:
            raise ValueError("a decode request has one or more prompts, and one all_masks flag per prompt")

    @classmethod
    def one(cls, embedding: Any, prompt: SamPrompt, all_masks: bool = False) -> DecodeRequest:
        return cls(embedding, (prompt,), (all_masks,))


@dataclass(frozen=True, eq=False)
class GridRequest:
    """One batch of the automatic mask generator: single foreground clicks at `points` [N, 2]
    (picture pixels, float32) on one embedding, with the generator's parameters."""

    embedding: Any
    points: npt.NDArray[np.float32]
    settings: Everything


@dataclass(frozen=True, eq=False)
class MatteJob:
    """One picture for image.matte and what to make from its matte."""

    picture: Picture
    outputs: OutputsSpec
    part: str | None = None  # a route with parts: the one asked; None: every part's, stacked

    def shown(self, route: MatteRoute) -> Picture:
        """The picture the outputs are made of: on a route with parts, without one asked, the
        picture once a part, stacked as the mattes are (rembg stacks its cutouts so)."""
        if not route.parts or self.part is not None:
            return self.picture
        return np.concatenate([self.picture] * len(route.parts), axis=0)


def matte_and_outputs(route: MatteRoute, jobs: Sequence[MatteJob]) -> list[Rendered]:
    """MATTE: the route's mattes, then each job's outputs made from them on the route's device."""
    started = time.perf_counter()
    pictures = [job.picture for job in jobs]
    mattes = route.matte_parts(pictures, [job.part for job in jobs]) if route.parts else route.matte(pictures)
    network = (time.perf_counter() - started) * 1000
    try:
        made = matte_render.rendered(
            [(job.shown(route), matte, job.outputs) for job, matte in zip(jobs, mattes, strict=True)], route.device
        )
        return [dataclasses.replace(r, stages_ms={"network": network, **r.stages_ms}) for r in made]
    except matte_render.TorchMissingError as exc:
        raise failed_precondition(
            Reason.ENGINE_NOT_INSTALLED,
            f"the cutout, composite and mask are made with torch, which this infer service cannot import ({exc}); "
            "install craftai-infer[torch], or ask for the matte alone",
        ) from exc


MATTE: Operation[MatteRoute, MatteJob, Rendered] = Operation("matte", matte_and_outputs)
ENCODE: Operation[SegmentRoute, Picture, Any] = Operation("encode", lambda route, pictures: route.encode(pictures))
DECODE: Operation[SegmentRoute, DecodeRequest, list[SamMasks]] = Operation(
    "decode", lambda route, requests: route.decode(requests)
)
GRID: Operation[SegmentRoute, GridRequest, Candidates] = Operation("grid", lambda route, requests: route.grid(requests))

Factory = Callable[[RouteFiles, str], Route]  # (verified files, device) -> the built route
