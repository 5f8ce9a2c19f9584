"""image.matte: remove a picture's background, and make what the app asked from the matte.

options checked (matte_options: before any work) -> resolve -> load (first use) -> decode (the
picture, and a background picture if one came; limits checked before any pixel) -> the route's
MATTE operation on its worker (batched with like pictures where the route batches; interactive
work when the picture has at most CRAFTAI_INTERACTIVE_MATTE_PIXELS, else bulk): the matte,
then the cutout, composite and mask made from it on the route's device -> each output encoded
(PNG, WebP or JPEG, or its raw pixels copied) on the CPU pool, at the same time.

Raw outputs (MATTE_FORMAT_RAW) are as large as their pixels: where those asked of a picture could
not fit one message (CRAFTAI_MAX_MESSAGE_BYTES), the request is refused from the picture's header,
before any memory is admitted or any pixel decoded (`check_raw_size`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from craftai_common.errors import ServiceError, invalid_argument
from craftai_infer import matte_options, memory
from craftai_infer.encodings import Format
from craftai_infer.features import run as runs
from craftai_infer.features.context import MATTE_BYTES_PER_PIXEL, FeatureContext
from craftai_infer.loader import LoadedRoute
from craftai_infer.pipelines.matte_spec import Kind, OutputsSpec, Rendered
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import MATTE, MatteJob, MatteRoute
from craftai_infer.scheduling import WorkClass, work_class_var
from craftai_wire.v1 import common_pb2, infer_pb2
from craftai_wire.vocabulary import PARTS_OF, Reason, Recipe

FEATURE = "image.matte"
STAGES = ("decode", "model", "encode")
T = TypeVar("T")
# What a request holds per pixel of its picture while its outputs are made, beyond
# MATTE_BYTES_PER_PIXEL (the picture, the matte, the encoders), counted against the decode budget
# (craftai_infer.memory); the peaks of pipelines/matte_outputs.py on the CPU, where they are made
# on a CPU route (tests/unit/test_matte_memory.py measures them): the foreground estimation's
# float planes (a cutout or a composite that is not naive), a composite's integer arithmetic and
# its background layer, a naive cutout's RGBA, a mask.
FOREGROUND_BYTES_PER_PIXEL = 200
# A composite that is not naive: the estimation's planes, then the composite's arithmetic and its
# background layer (over a blur its peak reached 218 bytes a pixel in some runs of that test).
FOREGROUND_COMPOSITE_BYTES_PER_PIXEL = 240
COMPOSITE_BYTES_PER_PIXEL = 190  # naive (over a blur: up to 172 measured)
NAIVE_CUTOUT_BYTES_PER_PIXEL = 10
MASK_BYTES_PER_PIXEL = 4
# A background picture's own pixels: decoded (3-4 bytes) and the decoder's copy.
BACKGROUND_BYTES_PER_PIXEL = 8
# The answer of each output, per pixel: its bytes and the message gRPC serialises them into. Raw
# (matte_options.RAW_BYTES_PER_PIXEL: 1 byte a pixel for a grey matte or mask, 4 for RGBA) is the
# most any format holds: an encoding comes to at most about as many.
ANSWER_BYTES_PER_PIXEL: dict[Kind, int] = {kind: 2 * size for kind, size in matte_options.RAW_BYTES_PER_PIXEL.items()}
RAW_INSTEAD = "ask for PNG or WebP (compressed, the same pixels), fewer raw outputs, or send a smaller picture"


def bytes_per_pixel(kinds: Collection[Kind], naive: bool) -> int:
    """What a request for these outputs holds per pixel of its picture (see the constants)."""
    making = 0
    if not naive and "composite" in kinds:
        making = FOREGROUND_COMPOSITE_BYTES_PER_PIXEL
    elif not naive and "cutout" in kinds:
        making = FOREGROUND_BYTES_PER_PIXEL
    elif "composite" in kinds:
        making = COMPOSITE_BYTES_PER_PIXEL
    elif "cutout" in kinds:
        making = NAIVE_CUTOUT_BYTES_PER_PIXEL
    elif "mask" in kinds:
        making = MASK_BYTES_PER_PIXEL
    answer = sum(ANSWER_BYTES_PER_PIXEL[kind] for kind in kinds)
    return MATTE_BYTES_PER_PIXEL + making + answer


@dataclass(frozen=True)
class Estimate:
    """A request's peak memory, from its picture's size and options, before any pixel is decoded:
    the picture and what its outputs hold (`bytes_per_pixel`), what the route's pre- and
    post-processing hold (MatteRoute.working_bytes), a background picture's pixels."""

    width: int
    height: int
    kinds: tuple[Kind, ...]
    naive: bool
    background: int = 0  # the background picture's pixels

    def nbytes(self, route: MatteRoute) -> int:
        pixels = self.width * self.height
        return (
            pixels * bytes_per_pixel(self.kinds, self.naive)
            + route.working_bytes(self.height, self.width)
            + self.background * BACKGROUND_BYTES_PER_PIXEL
        )

    @property
    def words(self) -> str:
        """The outputs as a message names them: "matte and cutout", "naive cutout"."""
        return " and ".join(f"naive {k}" if self.naive and k in ("cutout", "composite") else k for k in self.kinds)

    def smaller(self, route: MatteRoute, budget: int) -> str:
        """What would fit `budget` instead, in words: cheaper outputs, or a smaller picture."""
        cheaper = []
        if not self.naive and ("cutout" in self.kinds or "composite" in self.kinds):
            cheaper.append(dataclasses.replace(self, naive=True))
        if set(self.kinds) != {"matte"}:
            cheaper.append(dataclasses.replace(self, kinds=("matte",), naive=False))
        options = [f"the {e.words} (~{memory.mib(e.nbytes(route))})" for e in cheaper if e.nbytes(route) <= budget]
        scaled = self
        while scaled.width > 16 and scaled.nbytes(route) > budget:
            scaled = dataclasses.replace(scaled, width=scaled.width * 9 // 10, height=scaled.height * 9 // 10)
        if scaled.nbytes(route) <= budget:
            options.append(f"the same of a picture of at most {scaled.width}x{scaled.height}")
        return "it would fit with " + ", or ".join(options) if options else "ask for less"


def check_raw_size(asked: matte_options.Checked, width: int, height: int, limit: int, picture: str) -> None:
    """RESOURCE_EXHAUSTED (LIMIT_REACHED) where the raw outputs of a width x height matte (its
    parts stacked) come to more than one message may carry: known before any work, so refused
    then, in words naming the limit and what to ask instead (`picture`: the picture, in words)."""
    _raw_fits(asked.raw, asked.raw_bytes(width, height), limit, picture)


def _raw_fits(kinds: Collection[Kind], size: int, limit: int, picture: str) -> None:
    runs.check_bytes(size, limit, f"the raw {' and '.join(kinds)} of {picture}", RAW_INSTEAD)


@dataclass(frozen=True)
class Made:
    """A Matte request's work up to its encodes: what was asked, the route, the picture and the
    outputs made (a cutout session keeps these)."""

    asked: matte_options.Checked
    loaded: LoadedRoute[MatteRoute]
    picture: Picture
    spec: OutputsSpec
    rendered: Rendered

    @property
    def size(self) -> tuple[int, int]:
        height, width = self.picture.shape[:2]
        return width, height


class MatteFeature:
    def __init__(self, context: FeatureContext) -> None:
        self.context = context

    async def matte(self, request: infer_pb2.MatteRequest, run: runs.Run) -> infer_pb2.MatteResult:
        run.stages = STAGES
        made = await self.made(request, run)
        result = run.result(infer_pb2.MatteResult)
        await self.answered(
            made.asked, made.loaded.ref, made.rendered, run, size=made.size, device=made.loaded.device, into=result
        )
        return result

    async def made(
        self, request: infer_pb2.MatteRequest, run: runs.Run, *, also: Collection[Kind] = (), one_matte: bool = False
    ) -> Made:
        """Options checked, the route loaded, the picture decoded within the decode budget, the matte
        and the outputs made (stages "decode" and "model"); `also`: outputs made beyond those asked
        (counted in the budget too), which the answer leaves out; `one_matte`: a recipe with parts
        must be asked one part (a matte as large as the picture)."""
        c = self.context
        asked = matte_options.check(request, c.settings.png_compress_level)
        resolved = await runs.resolve(c.routes, request.route, FEATURE)
        asked.for_recipe(resolved.route.recipe)
        recipe = resolved.route.recipe
        if one_matte and asked.part is None and recipe in PARTS_OF:
            parts = ", ".join(PARTS_OF[Recipe(recipe)])
            raise invalid_argument(
                Reason.BAD_OPTIONS, f"{recipe} mattes {parts} apart; name the part to fix (part)", field="part"
            )
        loaded = await runs.load(c.routes, resolved, run)
        route: MatteRoute = loaded.route
        kinds = tuple(dict.fromkeys((*asked.kinds, *also)))
        with run.stage("decode", "decoding the picture"):
            picture, background = await self._decoded(
                request.picture.data, asked, kinds, route, c.picture_device(loaded)
            )
        height, width = picture.shape[:2]
        spec = dataclasses.replace(asked.within(width, height, background), kinds=frozenset(kinds))
        made = [kind for kind in asked.kinds if kind != "matte"]
        doing = "removing the background" + (f" and making the {', '.join(made)}" if made else "")
        with run.stage("model", f"{doing} ({loaded.device})"):
            job = MatteJob(picture, spec, asked.part)
            rendered: Rendered = await loaded.submit(MATTE, job, run.notices, route.batch_key(picture))
        run.stages_ms.update(rendered.stages_ms)  # within "model": the network, then each output made
        if "network" in rendered.stages_ms:
            c.routes.measure(loaded.ref, loaded.device, rendered.stages_ms["network"])
        return Made(asked, loaded, picture, spec, rendered)

    async def answered(
        self,
        asked: matte_options.Checked,
        route: common_pb2.RouteRef,
        rendered: Rendered,
        run: runs.Run,
        *,
        size: tuple[int, int],
        device: str,
        into: infer_pb2.MatteResult,
    ) -> None:
        """The outputs asked, encoded on the CPU pool at the same time (stage "encode"), written
        in `into` (a message inside the run's answer, or the answer itself) with the picture's
        `size` (width, height); the whole answer's size checked against the message limit."""
        c = self.context
        if asked.raw:  # exact now (a frame's stream is not checked before its work): none copied in vain
            made = sum(getattr(rendered, kind).nbytes for kind in asked.raw)
            _raw_fits(asked.raw, made, c.settings.max_message_bytes, f"a {size[0]}x{size[1]} picture")
        with run.stage("encode", f"encoding the {', '.join(asked.kinds)}"):
            encoded = await asyncio.gather(
                *(c.on_cpu(c.encode, getattr(rendered, kind), asked.encodings[kind]) for kind in asked.kinds)
            )
        images = dict(zip(asked.kinds, encoded, strict=True))
        result = into
        result.route.CopyFrom(route)
        result.width, result.height = size
        result.device = device
        if asked.legacy:
            result.matte_png = images["matte"]
            result.cutout_png = images.get("cutout", b"")
        else:
            for kind, data in images.items():
                _image(getattr(result, kind), kind, data, asked.encodings[kind].format, rendered)
        result.timing.CopyFrom(run.timing())
        runs.check_size(
            run.answer if run.answer is not None else result,
            c.settings.max_message_bytes,
            f"the {', '.join(asked.kinds)}",
            "ask for fewer outputs, WebP or JPEG rather than PNG or raw, or send a smaller picture",
            payload=sum(len(data) for data in images.values()),
        )

    async def _decoded(
        self,
        data: bytes,
        asked: matte_options.Checked,
        kinds: tuple[Kind, ...],
        route: MatteRoute,
        device: str | None,
    ) -> tuple[Picture, Picture | None]:
        """The picture and the background picture (when one came), decoded once the request's cost
        fits the decode budget (`cost`: the headers read first, no pixel decoded before; a request
        that could never fit is refused at once with what would); the picture for the route's
        `device` (FeatureContext.decode). The request's class is set from the picture's size."""
        c = self.context
        head = await c.header_of(data)
        width, height = head.width, head.height
        small = width * height <= c.settings.interactive_matte_pixels
        work_class_var.set(WorkClass.INTERACTIVE if small else WorkClass.BULK)  # for the rest of this request
        back = asked.background_picture
        back_pixels = 0
        if back is not None:
            back_head = await c.on_cpu(self._background, c.header, back)  # in the request's class
            back_pixels = back_head.width * back_head.height
        # every part's matte stacked: each output as tall as the picture once a part
        stacked = len(route.parts) if route.parts and asked.part is None else 1
        estimate = Estimate(width, height * stacked, kinds, asked.naive, back_pixels)
        picture_words = f"a {width}x{height} picture" + (f" ({stacked} parts stacked)" if stacked > 1 else "")
        check_raw_size(asked, width, height * stacked, c.settings.max_message_bytes, picture_words)
        what = f"a {estimate.words} of a {width}x{height} picture"
        if back is not None:
            what += f" over a {back_head.width}x{back_head.height} background"
        nbytes = estimate.nbytes(route)
        hint = estimate.smaller(route, c.budget.budget_bytes) if nbytes > c.budget.budget_bytes else ""
        async with c.admitted(nbytes, what, smaller=hint) as hold:
            picture = await c.on_cpu(c.decode, data, device)
            hold(picture)  # the request holds its picture to the end: the whole cost goes with it
            background = None if back is None else await c.on_cpu(self._background, c.decode, back)
        return picture, background

    @staticmethod
    def _background(step: Callable[[bytes], T], data: bytes) -> T:
        """`step` (header or decode) on the background picture; its refusals name its own field."""
        try:
            return step(data)
        except ServiceError as error:
            field = "background.picture.data"
            raise ServiceError(
                error.code,
                error.reason,
                f"the background picture: {error.message}",
                metadata=error.metadata,
                violations=[(field, f"the background picture: {error.message}")] if error.violations else [],
            ) from error


def _image(into: infer_pb2.MatteImage, kind: Kind, data: bytes, fmt: Format, rendered: Rendered) -> None:
    """One output written in the result's own message (features/run.py says why)."""
    pixels = getattr(rendered, kind)
    into.data = data
    into.format = matte_options.FORMAT_VALUES[fmt]
    into.has_alpha = kind == "cutout" or (kind == "composite" and pixels.shape[2] == 4)
