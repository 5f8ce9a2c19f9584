"""image.matte on a stream of frames (MatteFrames): the options once, then frames answered in order.

start (options checked, the route resolved and loaded: held for the stream, the background picture
decoded once) -> frames read one by one (each one's size checked against the first before any
work) -> at most `in_flight` frames at work at once, each as a Matte request is (its cost admitted
in the decode budget, decoded or taken raw, the route's MATTE operation batched with the other
frames at work and with other requests, the outputs encoded) -> answered in the order they came.
The server reads no frame beyond `in_flight` ahead of the answers and says that number first
(FramesStarted), so that the caller sends a few more at most (the SDK does); one that stops
reading is ended by the stalled-write limit. Frames are bulk work: a click stays interactive beside a video.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from craftai_common.errors import ServiceError, invalid_argument
from craftai_infer import matte_options
from craftai_infer.features import run as runs
from craftai_infer.features.context import FeatureContext
from craftai_infer.features.matte import BACKGROUND_BYTES_PER_PIXEL, FEATURE, MatteFeature, check_raw_size
from craftai_infer.features.matte import Estimate as MatteEstimate
from craftai_infer.loader import LoadedRoute
from craftai_infer.pipelines import matte_temporal
from craftai_infer.pipelines.matte_render import render_device
from craftai_infer.pipelines.matte_spec import OutputsSpec, Rendered
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes import MATTE, MatteJob, MatteRoute
from craftai_infer.scheduling import WorkClass, work_class_var
from craftai_wire.v1 import common_pb2, infer_pb2
from craftai_wire.vocabulary import Reason

STAGES = ("decode", "model", "stabilize", "encode")
CHANNELS = {infer_pb2.FRAME_ENCODING_RGB: 3, infer_pb2.FRAME_ENCODING_RGBA: 4}
F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Chain:
    """A frame's ties to the one before it: that frame's picture and averaged matte (None before the
    first), and where this frame's go. The picture comes as soon as it is decoded, so that a frame
    is compared with the one before while both are at work; the matte comes in order."""

    picture_before: asyncio.Future[Picture | None]
    picture: asyncio.Future[Picture | None]
    matte_before: asyncio.Future[F32 | None]
    matte: asyncio.Future[F32 | None]

    @classmethod
    def first(cls) -> Chain:
        loop = asyncio.get_running_loop()
        picture_before: asyncio.Future[Picture | None] = loop.create_future()
        matte_before: asyncio.Future[F32 | None] = loop.create_future()
        picture_before.set_result(None)
        matte_before.set_result(None)
        return cls(picture_before, loop.create_future(), matte_before, loop.create_future())

    def next(self) -> Chain:
        loop = asyncio.get_running_loop()
        return Chain(self.picture, loop.create_future(), self.matte, loop.create_future())

    def end(self) -> None:
        """The frames after this one end with it (the stream ends here)."""
        for mine in (self.picture, self.matte):
            if not mine.done():
                mine.cancel()


@dataclass(frozen=True)
class Received:
    """A frame as read from its message, its bytes taken once (each read of a message's bytes field
    is a copy of the frame, made under the interpreter lock)."""

    data: bytes
    encoding: infer_pb2.FrameEncoding.ValueType
    width: int
    height: int

    @classmethod
    def of(cls, frame: infer_pb2.Frame) -> Received:
        return cls(frame.data, frame.encoding, frame.width, frame.height)


@dataclass(frozen=True)
class Stream:
    """What every frame of one stream shares: its options, its route, its background."""

    asked: matte_options.Checked
    loaded: LoadedRoute[MatteRoute]
    background: Picture | None
    stacked: int  # a recipe with parts, every part asked: each output as tall as the frame times this
    stabilize: float  # the previous matte's weight where the picture is still (pipelines/matte_temporal.py); 0: off


class FramesFeature:
    def __init__(self, context: FeatureContext, matte: MatteFeature) -> None:
        self.context = context
        self.matte = matte

    async def frames(
        self, requests: AsyncIterator[infer_pb2.MatteFramesRequest]
    ) -> AsyncIterator[infer_pb2.MatteFramesEvent]:
        """The stream's events: the route's load progress, then each frame's result in order, then
        FramesDone; an error (a bad frame, a frame that fails) ends it after the frames before it."""
        began = time.perf_counter()
        work_class_var.set(WorkClass.BULK)  # for every frame's task, made below in this context
        start = await self._start(requests)
        in_flight = self._in_flight(start.in_flight)
        run = runs.Run()
        opening = asyncio.ensure_future(self._open(start.matte, start.stabilize, run))
        slots = asyncio.Semaphore(in_flight)
        order: asyncio.Queue[
            asyncio.Future[tuple[infer_pb2.MatteFramesEvent, list[common_pb2.Notice]]] | Exception | None
        ]
        order = asyncio.Queue()
        feeding: asyncio.Future[None] | None = None
        try:
            async for loading in runs.items(run, opening):
                yield _event(loading)
            stream = opening.result()
            started = infer_pb2.FramesStarted(in_flight=in_flight, device=stream.loaded.device)
            started.route.CopyFrom(stream.loaded.ref)
            yield infer_pb2.MatteFramesEvent(started=started)
            feeding = asyncio.ensure_future(self._feed(requests, stream, slots, order))
            answered = 0
            while (item := await order.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                answer, notices = await item
                slots.release()
                for notice in notices:
                    yield infer_pb2.MatteFramesEvent(notice=notice)
                yield answer
                answered += 1
            done = infer_pb2.FramesDone(frames=answered, total_ms=(time.perf_counter() - began) * 1000)
            yield infer_pb2.MatteFramesEvent(done=done)
        finally:
            pending: list[asyncio.Future[Any]] = [opening]
            if feeding is not None:
                pending.append(feeding)
            while not order.empty():
                left = order.get_nowait()
                if isinstance(left, asyncio.Future):
                    pending.append(left)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            run.release()

    async def _start(self, requests: AsyncIterator[infer_pb2.MatteFramesRequest]) -> infer_pb2.MatteFramesStart:
        first = await self._next(requests, "the start message")
        if first is None or first.WhichOneof("message") != "start":
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                "the first message of a frame stream is its start (the options: MatteFramesStart), then the frames",
                field="start",
            )
        if first.start.matte.picture.data:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                "the start's matte.picture stays empty: send each picture as a frame",
                field="start.matte.picture",
            )
        if not first.start.matte.outputs:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                "name the outputs each frame answers (start.matte.outputs: matte, cutout, composite, mask)",
                field="start.matte.outputs",
            )
        return first.start

    def _in_flight(self, asked: int) -> int:
        s = self.context.settings
        if asked < 0 or asked > s.max_frames_in_flight:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                f"in_flight is {asked}; it is between 1 and {s.max_frames_in_flight} (CRAFTAI_MAX_FRAMES_IN_FLIGHT), "
                f"or 0 for the server's {s.frames_in_flight}",
                field="start.in_flight",
            )
        return asked or s.frames_in_flight

    async def _open(self, request: infer_pb2.MatteRequest, stabilize: float, run: runs.Run) -> Stream:
        """The options checked, the route loaded (held by `run` until the stream ends), the
        background picture decoded once (its memory admitted for the stream's whole life)."""
        c = self.context
        if not 0.0 <= stabilize < 1.0:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                f"stabilize is {stabilize:g}; it is the previous matte's weight where the picture is still, "
                "in [0, 1) (0: off)",
                field="start.stabilize",
            )
        asked = matte_options.check(request, c.settings.png_compress_level)
        resolved = await runs.resolve(c.routes, request.route, FEATURE)
        asked.for_recipe(resolved.route.recipe)
        loaded = await runs.load(c.routes, resolved, run)
        route: MatteRoute = loaded.route
        background = None
        if asked.background_picture is not None:
            background = await c.decoded(asked.background_picture, BACKGROUND_BYTES_PER_PIXEL)
        stacked = len(route.parts) if route.parts and asked.part is None else 1
        if stabilize and stacked > 1:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                f"{resolved.route.recipe} mattes several parts at once; name the part (matte.part) to stabilize",
                field="start.stabilize",
            )
        return Stream(asked, loaded, background, stacked, stabilize)

    async def _next(
        self, requests: AsyncIterator[infer_pb2.MatteFramesRequest], what: str
    ) -> infer_pb2.MatteFramesRequest | None:
        """The next message, or None at the stream's end; a caller silent for longer than
        CRAFTAI_FRAMES_IDLE_SECONDS is ended (it holds a route and memory)."""
        idle = self.context.settings.frames_idle_seconds
        try:
            async with asyncio.timeout(idle):
                return await anext(requests)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise ServiceError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                Reason.STREAM_IDLE,
                f"no message came for {idle:g} s while waiting for {what} (CRAFTAI_FRAMES_IDLE_SECONDS); "
                "send frames without long pauses, or end the stream and start another",
            ) from None

    async def _feed(
        self,
        requests: AsyncIterator[infer_pb2.MatteFramesRequest],
        stream: Stream,
        slots: asyncio.Semaphore,
        order: asyncio.Queue[
            asyncio.Future[tuple[infer_pb2.MatteFramesEvent, list[common_pb2.Notice]]] | Exception | None
        ],
    ) -> None:
        """Frames read while slots are free, each one's work started at once; its future queued in
        order; an error queued after the frames before it; None at the end."""
        index = 0
        size: tuple[int, int] | None = None
        chain = Chain.first()
        try:
            while (message := await self._next(requests, f"frame {index}")) is not None:
                if message.WhichOneof("message") != "frame":
                    raise invalid_argument(
                        Reason.BAD_OPTIONS,
                        f"message {index + 1} is not a frame: the start comes once, first",
                        field=f"frames[{index}]",
                    )
                frame = Received.of(message.frame)
                found = await self._size(index, frame)
                if size is None:
                    size = found
                    words = f"frame {index} ({found[0]}x{found[1]}" + (
                        f", {stream.stacked} parts stacked)" if stream.stacked > 1 else ")"
                    )
                    try:  # every frame has this size: raw outputs that cannot fit a message, refused before any work
                        check_raw_size(
                            stream.asked,
                            found[0],
                            found[1] * stream.stacked,
                            self.context.settings.max_message_bytes,
                            words,
                        )
                    except ServiceError as error:
                        raise _of_frame(index, error) from error
                elif found != size:
                    raise invalid_argument(
                        Reason.BAD_PICTURE,
                        f"frame {index} is {found[0]}x{found[1]}; this stream's frames are {size[0]}x{size[1]} (its "
                        "first frame's size): start another stream for frames of another size",
                        field=f"frames[{index}]",
                    )
                await slots.acquire()
                order.put_nowait(asyncio.ensure_future(self._frame(index, frame, size, stream, chain)))
                chain = chain.next()
                index += 1
        except Exception as error:
            order.put_nowait(error)
        else:
            order.put_nowait(None)

    async def _size(self, index: int, frame: Received) -> tuple[int, int]:
        """The frame's width and height (a raw frame's as given, checked against its bytes; an
        encoded one's from its header), within the picture limits."""
        c = self.context
        channels = CHANNELS.get(frame.encoding)
        if channels is None:
            try:
                head = await c.header_of(frame.data)
            except ServiceError as error:
                raise _of_frame(index, error) from error
            return head.width, head.height
        width, height = frame.width, frame.height
        if width <= 0 or height <= 0 or len(frame.data) != width * height * channels:
            raise invalid_argument(
                Reason.BAD_PICTURE,
                f"frame {index} has {len(frame.data):,} bytes; raw {width}x{height} pixels of {channels} bytes are "
                f"{max(width, 0) * max(height, 0) * channels:,} (width and height > 0, rows one after another)",
                field=f"frames[{index}].data",
            )
        limits = c.limits
        if not limits.admit(width, height):
            raise invalid_argument(
                Reason.PICTURE_TOO_LARGE,
                f"frame {index} is {width}x{height} pixels; {limits}",
                field=f"frames[{index}]",
            )
        return width, height

    async def _frame(
        self, index: int, frame: Received, size: tuple[int, int], stream: Stream, chain: Chain
    ) -> tuple[infer_pb2.MatteFramesEvent, list[common_pb2.Notice]]:
        """One frame as one Matte request: admitted, decoded (or taken raw), matted, encoded;
        `chain`: the previous frame's matte to steady this one's with, and where this one's goes."""
        try:
            return await self._matted(index, frame, size, stream, chain)
        except ServiceError as error:
            raise _of_frame(index, error) from error
        finally:
            chain.end()

    async def _matted(
        self, index: int, frame: Received, size: tuple[int, int], stream: Stream, chain: Chain
    ) -> tuple[infer_pb2.MatteFramesEvent, list[common_pb2.Notice]]:
        c = self.context
        asked, loaded = stream.asked, stream.loaded
        route = loaded.route
        run = runs.Run(STAGES)
        width, height = size
        estimate = MatteEstimate(width, height * stream.stacked, asked.kinds, asked.naive)  # background: once
        nbytes = estimate.nbytes(route)
        what = f"a {estimate.words} of frame {index} ({width}x{height})"
        device = c.picture_device(loaded)
        with run.stage("decode", f"decoding frame {index}"):
            async with c.admitted(nbytes, what, smaller=estimate.smaller(route, c.budget.budget_bytes)) as hold:
                picture = await c.on_cpu(self._pixels, frame, size, device)
                hold(picture)
        spec = dataclasses.replace(asked.within(width, height, stream.background), kinds=frozenset(asked.kinds))
        steady = stream.stabilize > 0.0
        comparing = None
        if steady:
            chain.picture.set_result(picture)
            comparing = asyncio.ensure_future(self._still(picture, chain))  # while the model runs
        with run.stage("model", f"removing the background of frame {index} ({loaded.device})"):
            # steadied: the matte alone here, the outputs made from the steadied matte below
            job = MatteJob(
                picture, dataclasses.replace(spec, kinds=frozenset({"matte"})) if steady else spec, asked.part
            )
            try:
                rendered: Rendered = await loaded.submit(MATTE, job, run.notices, route.batch_key(picture))
            except BaseException:
                if comparing is not None:
                    comparing.cancel()
                raise
        run.stages_ms.update(rendered.stages_ms)
        if "network" in rendered.stages_ms:
            c.routes.measure(loaded.ref, loaded.device, rendered.stages_ms["network"])
        if comparing is not None:
            with run.stage("stabilize", f"steadying the matte of frame {index} with the frames before it"):
                where_still = await comparing
                rendered = await self._steadied(picture, rendered, where_still, spec=spec, stream=stream, chain=chain)
        answer = infer_pb2.MatteFramesEvent()  # the event sent, written in place (no copy of its pictures)
        answer.frame.index = index
        await self.matte.answered(
            asked, loaded.ref, rendered, run, size=size, device=loaded.device, into=answer.frame.matte
        )
        notices = list(run.notices.items)
        return answer, notices

    async def _still(self, picture: Picture, chain: Chain) -> npt.NDArray[np.bool_] | None:
        """Where this frame did not change since the one before (None for the first frame)."""
        before = await chain.picture_before
        if before is None:
            return None
        return await self.context.on_cpu(matte_temporal.still, picture, before)

    async def _steadied(
        self,
        picture: Picture,
        rendered: Rendered,
        where_still: npt.NDArray[np.bool_] | None,
        *,
        spec: OutputsSpec,
        stream: Stream,
        chain: Chain,
    ) -> Rendered:
        """The matte steadied by the previous frame's average (in the frames' order: this waits for
        it), then the outputs asked made from it on the route's device, as the route makes them."""
        c = self.context
        assert rendered.matte is not None
        previous = await chain.matte_before
        steadied, kept = await c.on_cpu(
            matte_temporal.averaged, previous, where_still, rendered.matte, stream.stabilize
        )
        chain.matte.set_result(kept)
        if spec.kinds == {"matte"}:
            return Rendered(matte=steadied, stages_ms=rendered.stages_ms)
        from craftai_infer.pipelines.matte_outputs import render  # torch: as every output but the matte

        device = render_device(stream.loaded.device)
        made = await c.on_cpu(lambda: render(picture, steadied, spec, device))
        return dataclasses.replace(made, stages_ms={**rendered.stages_ms, **made.stages_ms})

    def _pixels(self, frame: Received, size: tuple[int, int], device: str | None) -> Picture:
        """The frame's pixels: a raw frame's bytes copied once (into page-locked memory for a GPU
        route; a message's bytes are read-only, and routes may take their pictures as tensors), an
        encoded one decoded as any picture is."""
        channels = CHANNELS.get(frame.encoding)
        if channels is None:
            return self.context.decode(frame.data, device)
        width, height = size
        pixels = np.frombuffer(frame.data, dtype=np.uint8).reshape(height, width, channels)
        if device is not None:
            from craftai_infer.engines.staging import pinned_copy  # torch: only routes on a GPU ask

            return pinned_copy(pixels)
        return pixels.copy()


def _event(item: runs.Item) -> infer_pb2.MatteFramesEvent:
    if isinstance(item, common_pb2.Notice):
        return infer_pb2.MatteFramesEvent(notice=item)
    return infer_pb2.MatteFramesEvent(progress=item)


def _of_frame(index: int, error: ServiceError) -> ServiceError:
    """`error` saying which frame it is about."""
    return ServiceError(
        error.code,
        error.reason,
        f"frame {index}: {error.message}",
        metadata={**error.metadata, "frame": str(index)},
        violations=[
            (f"frames[{index}].{name}" if name else f"frames[{index}]", text) for name, text in error.violations
        ],
        retry_after=error.retry_after,
    )
