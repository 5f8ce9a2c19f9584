"""Frames through MatteFrames (a video, a camera): the messages sent and the answers read, with no I/O.

An app gives an iterable of frames: numpy arrays (H, W, 3) RGB or (H, W, 4) RGBA, sent as raw
pixels (no encoding on either side), or encoded pictures (bytes, or a path, sent as they are). The
start message carries remove_background's options once. The answers come in the frames' order,
each a `FrameOutput`. Both clients drive these through their transport's `frames` call
(`AiClient.remove_background_frames`, `AsyncAiClient.remove_background_frames`).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from craftai.calls import Colour, matte_options, matte_request
from craftai.outputs import MatteOutput, matte_output
from craftai.pictures import Picture, read_picture
from craftai_wire.v1 import common_pb2, infer_pb2

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FrameLike = npt.NDArray[np.uint8] | bytes | str | os.PathLike[str]
else:
    FrameLike = Any

RAW = {3: infer_pb2.FRAME_ENCODING_RGB, 4: infer_pb2.FRAME_ENCODING_RGBA}
# Frames sent ahead of the answers beyond those the server works on: the next ones wait there
# while an answer travels back, and no more (gRPC's windows would take megabytes of frames).
AHEAD = 2


class Window:
    """The frames a blocking stream may send before their answers: none until the server says how
    many it works on (FramesStarted), then one more per answer. `close` frees a sender waiting."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._free = 0
        self._closed = False

    def open(self, in_flight: int) -> None:
        with self._changed:
            self._free += in_flight + AHEAD
            self._changed.notify_all()

    def answered(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def take(self) -> bool:
        """Wait for room to send one frame; False once the stream is over."""
        with self._changed:
            self._changed.wait_for(lambda: self._free > 0 or self._closed)
            if self._closed:
                return False
            self._free -= 1
            return True


class AsyncWindow:
    """Window for an asyncio stream (its sender is a task that gRPC cancels when the call ends)."""

    def __init__(self) -> None:
        self._free = asyncio.Semaphore(0)

    def open(self, in_flight: int) -> None:
        for _ in range(in_flight + AHEAD):
            self._free.release()

    def answered(self) -> None:
        self._free.release()

    async def take(self) -> None:
        await self._free.acquire()


@dataclass(frozen=True)
class FrameOutput:
    """One frame's answer: its place in the stream (from 0) and its outputs, as remove_background's."""

    index: int
    output: MatteOutput


@dataclass(frozen=True)
class FramesStarted:
    """The stream's route is loaded: the frames it works on at once, the route and its device."""

    in_flight: int
    recipe: str
    engine: str
    device: str


@dataclass(frozen=True)
class FramesDone:
    """The stream's end: how many frames were answered, and the server's time from start to last."""

    frames: int
    total_ms: float


class FramesOptions(TypedDict, total=False):
    """remove_background_frames' options by name: remove_background's (`starting` checks them)."""

    outputs: str | Iterable[str] | None
    cutout: bool
    naive: bool
    bg_color: Colour | None
    bg_blur: float | None
    bg_image: Picture | None
    threshold: float | None
    format: str | Mapping[str, str] | None
    png_level: int | None
    jpeg_quality: int | None
    part: str | None
    recipe: str | None
    engine: str | None
    in_flight: int | None
    stabilize: float | None


def starting(
    *,
    outputs: str | Iterable[str] | None = None,
    cutout: bool = False,
    naive: bool = False,
    bg_color: Colour | None = None,
    bg_blur: float | None = None,
    bg_image: Picture | None = None,
    threshold: float | None = None,
    format: str | Mapping[str, str] | None = None,
    png_level: int | None = None,
    jpeg_quality: int | None = None,
    part: str | None = None,
    recipe: str | None = None,
    engine: str | None = None,
    in_flight: int | None = None,
    stabilize: float | None = None,
) -> infer_pb2.MatteFramesRequest:
    """The first message: the options of every frame, remove_background's (checked here: ValueError
    in plain words), as a Matte request without its picture; `in_flight`: frames at work at once on
    the server (None: its default, CRAFTAI_FRAMES_IN_FLIGHT); `stabilize`: the previous matte's
    weight where the picture is still, in [0, 1) (a still background stops flickering; None or 0:
    each frame's matte is remove_background's)."""
    if in_flight is not None and in_flight < 1:
        raise ValueError(f"in_flight is {in_flight}; it is the number of frames at work at once, at least 1")
    if stabilize is not None and not 0.0 <= stabilize < 1.0:
        raise ValueError(
            f"stabilize is {stabilize}; it is the previous matte's weight where the picture is still, in [0, 1)"
        )
    options = matte_options(
        outputs=outputs,
        cutout=cutout,
        naive=naive,
        bg_color=bg_color,
        bg_blur=bg_blur,
        bg_image=read_picture(bg_image) if bg_image is not None else None,
        threshold=threshold,
        format=format,
        png_level=png_level,
        jpeg_quality=jpeg_quality,
        part=part,
    )
    start = infer_pb2.MatteFramesStart(in_flight=in_flight or 0, stabilize=stabilize or 0.0)
    start.matte.CopyFrom(matte_request(b"", options, recipe, engine))
    return infer_pb2.MatteFramesRequest(start=start)


def frame_message(frame: FrameLike, index: int) -> infer_pb2.MatteFramesRequest:
    """One frame: an array's pixels as they are, an encoded picture's bytes (a path read now)."""
    message = infer_pb2.MatteFramesRequest()
    if isinstance(frame, bytes):
        message.frame.data = frame
    elif isinstance(frame, (str, os.PathLike)):
        message.frame.data = Path(frame).read_bytes()
    else:
        shape = getattr(frame, "shape", None)
        if shape is None or len(shape) != 3 or shape[2] not in RAW or str(getattr(frame, "dtype", "")) != "uint8":
            found = type(frame).__name__ + ("" if shape is None else f" of shape {tuple(shape)}")
            raise ValueError(
                f"frame {index} is {found}; a frame is a uint8 array (height, width, 3) RGB or (height, width, 4) "
                "RGBA, or an encoded picture (bytes or a path)"
            )
        import numpy as np  # arrays came, so numpy is here

        message.frame.data = np.ascontiguousarray(frame).tobytes()
        message.frame.encoding = RAW[shape[2]]
        message.frame.height, message.frame.width = int(shape[0]), int(shape[1])
    return message


def requests(
    start: infer_pb2.MatteFramesRequest, frames: Iterable[FrameLike], window: Window
) -> Iterator[infer_pb2.MatteFramesRequest]:
    """The stream's messages: the start, then each frame as the app's iterable gives it, taken
    from it only when `window` has room (so a video is read as fast as it is answered)."""
    yield start
    source = iter(frames)
    index = 0
    while window.take():
        try:
            frame = next(source)
        except StopIteration:
            return
        yield frame_message(frame, index)
        index += 1


async def requests_off_the_loop(
    start: infer_pb2.MatteFramesRequest, frames: Iterable[FrameLike] | AsyncIterable[FrameLike], window: AsyncWindow
) -> AsyncIterator[infer_pb2.MatteFramesRequest]:
    """`requests` for an asyncio app: an async iterable's frames as they come; a blocking one's
    (a video decoded as it is read) taken on a worker thread, so the event loop never waits on it."""
    yield start
    done = object()
    if isinstance(frames, AsyncIterable):
        source = aiter(frames)

        async def take() -> Any:
            return await anext(source, done)
    else:
        blocking = iter(frames)

        async def take() -> Any:
            return await asyncio.to_thread(next, blocking, done)

    index = 0
    while True:
        await window.take()
        frame = await take()
        if frame is done:
            return
        yield await asyncio.to_thread(frame_message, frame, index)
        index += 1


class Reading:
    """One stream's events read, whatever the transport: the window of the try under way opened by
    FramesStarted and moved by each answer, progress to the callback, a frame's notices given with
    it. `window` is set by each try."""

    def __init__(self, request_id: str, on_progress: Callable[[common_pb2.Progress], None] | None) -> None:
        self.request_id = request_id
        self.on_progress = on_progress
        self.notices: list[str] = []
        self.window: Window | AsyncWindow | None = None

    def read(
        self, event: infer_pb2.MatteFramesEvent
    ) -> FrameOutput | FramesStarted | FramesDone | common_pb2.Progress | None:
        """What one event gives (`answer`), with the window moved and progress given to the callback
        (the web gateway passes each on to its client)."""
        item = answer(event, self.request_id, self.notices)
        if isinstance(item, FramesStarted) and self.window is not None:
            self.window.open(item.in_flight)
        elif isinstance(item, FrameOutput) and self.window is not None:
            self.window.answered()
        elif isinstance(item, common_pb2.Progress) and self.on_progress is not None:
            self.on_progress(item)
        return item

    def take(self, event: infer_pb2.MatteFramesEvent) -> FrameOutput | None:
        """The frame's output an event carries, if any."""
        item = self.read(event)
        return item if isinstance(item, FrameOutput) else None


def answer(
    event: infer_pb2.MatteFramesEvent, request_id: str, notices: list[str]
) -> FrameOutput | FramesStarted | FramesDone | common_pb2.Progress | None:
    """What one event gives the reader: a frame's output (with the notices since the last one),
    the start or the end, progress (the route's load), or nothing (a notice, kept for the next
    frame)."""
    kind = event.WhichOneof("event")
    if kind == "started":
        route = event.started.route
        return FramesStarted(event.started.in_flight, route.recipe, route.engine, event.started.device)
    if kind == "frame":
        output = FrameOutput(event.frame.index, matte_output(event.frame.matte, list(notices), request_id))
        notices.clear()
        return output
    if kind == "done":
        return FramesDone(event.done.frames, event.done.total_ms)
    if kind == "notice":
        notices.append(event.notice.message)
        return None
    if kind == "progress":
        return event.progress
    return None
