"""AiClient and AsyncAiClient: the Python SDK every app uses (one client per app id).

    from craftai import AiClient

    with AiClient(app_id="my-editor") as ai:          # the local server (started when none answers)
        for event in ai.setup("image.matte"):
            print(event)
        result = ai.remove_background("photo.jpg", outputs="matte,cutout,composite", bg_color="#2a6df4")
        Path("matte.png").write_bytes(result.matte_png)
        Path("cutout.png").write_bytes(result.cutout.data)    # hair keeps its colour, not the old background's
        with ai.open_session("photo.jpg") as picture:   # the encoder runs once, here
            first = picture.segment(points=[(310, 200, True)], low_res=True)
            better = picture.segment(points=[(310, 200, True), (40, 40, False)], mask_input=first.best.low_res)
            Path("mask.png").write_bytes(better.best.png)

Every call has a deadline; errors are raised as `CraftAiError` with the service's plain message.
A call the server could not answer (UNAVAILABLE: the connection was lost, the server restarted or
is shutting down) is tried again once the server is reachable again (`Retries`: up to 3 more
tries, waiting 20 s at most for the server); every other error is raised at once.

AsyncAiClient (grpc.aio) has the same methods, awaited, for asyncio apps (web backends):

    async with AsyncAiClient(app_id="my-backend") as ai:
        result = await ai.remove_background(photo_bytes, cutout=True)
        async with await ai.open_session(photo_bytes) as picture:
            first = await picture.segment(points=[(310, 200, True)])
        async for event in ai.setup("image.segment"):
            print(event)

Both run the same methods (craftai.methods: requests, answers, session re-opening written once);
only the transport differs (craftai.transport, craftai.transport_aio).

Credentials and TLS are described in craftai.transport. The parts: outputs (what an app gets back),
calls (the RPCs and their requests, built by pure functions), policy (deadlines, retries),
transport (channels, metadata, the retry loop, the one stream reader), session (SegmentSession).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Generator, Iterable, Iterator
from pathlib import Path
from typing import Generic, Self, TypeVar, Unpack

import grpc

import craftai.methods as ops
from craftai.brought import bring, upload
from craftai.calls import MATTE_FRAMES, RESOLVE_ROUTE, SETUP, SETUP_FROM, resolve_request, setup_request
from craftai.cutout import AsyncCutoutSession, CutoutOptions, CutoutSession, opening
from craftai.frames import (
    AsyncWindow,
    FrameLike,
    FrameOutput,
    FramesOptions,
    Reading,
    Window,
    requests,
    requests_off_the_loop,
    starting,
)
from craftai.installation import (
    FeatureInfo,
    FileOutcome,
    FileState,
    Limits,
    LoadedRoute,
    Notice,
    PinnedFile,
    Progress,
    RecipeInfo,
    RecipeRoute,
    ResolvedRoute,
    Route,
    RouteStatus,
    Runtime,
    SetupEvent,
    SetupOutput,
    Source,
    setup_event,
)
from craftai.outputs import (
    CutoutPrompt,
    EncodedImage,
    EverythingOutput,
    LowResMask,
    MaskFormat,
    MaskInput,
    MaskOutput,
    MatteOutput,
    Point,
    PointLike,
    Polygon,
    Prompt,
    Rle,
    SegmentOutput,
)
from craftai.pictures import Picture, read_picture
from craftai.policy import Deadlines, Retries, Retrying
from craftai.session import AsyncSegmentSession, SegmentSession
from craftai.transport import DEFAULT_ADDRESS, Connection, MiB, ProgressCallback, Transport, new_request_id
from craftai.transport_aio import AsyncTransport
from craftai_wire.v1 import catalogue_pb2_grpc, infer_pb2, infer_pb2_grpc, prepare_pb2_grpc
from craftai_wire.vocabulary import RouteState

__all__ = [
    "DEFAULT_ADDRESS",
    "AiClient",
    "AsyncAiClient",
    "AsyncCutoutSession",
    "AsyncSegmentSession",
    "CutoutPrompt",
    "CutoutSession",
    "Deadlines",
    "EncodedImage",
    "EverythingOutput",
    "FeatureInfo",
    "FileOutcome",
    "FileState",
    "Limits",
    "LoadedRoute",
    "LowResMask",
    "MaskFormat",
    "MaskInput",
    "MaskOutput",
    "MatteOutput",
    "MiB",
    "Notice",
    "Picture",
    "PinnedFile",
    "Point",
    "PointLike",
    "Polygon",
    "Progress",
    "ProgressCallback",
    "Prompt",
    "RecipeInfo",
    "RecipeRoute",
    "ResolvedRoute",
    "Retries",
    "Rle",
    "Route",
    "RouteState",
    "RouteStatus",
    "Runtime",
    "SegmentOutput",
    "SegmentSession",
    "SetupEvent",
    "SetupOutput",
    "Source",
]


TransportT = TypeVar("TransportT", Transport, AsyncTransport)
FramesRequest = infer_pb2.MatteFramesRequest
SETUP_WHAT = "the setup stream"


class _Client(Generic[TransportT]):
    """What both clients are made of: the connection (from the arguments and the environment), the
    deadlines and retries, and a transport of their kind."""

    _transport_type: type[TransportT]

    def __init__(
        self,
        app_id: str,
        target: str | None = None,
        *,
        catalogue: str | None = None,
        prepare: str | None = None,
        infer: str | None = None,
        deadlines: Deadlines | None = None,
        max_message_bytes: int = 64 * MiB,
        credentials: grpc.ChannelCredentials | None = None,
        app_key: str | None = None,
        root_certificates: bytes | str | os.PathLike[str] | None = None,
        certificate_chain: bytes | str | os.PathLike[str] | None = None,
        private_key: bytes | str | os.PathLike[str] | None = None,
        retries: Retries | None = None,
        start_server: bool = True,
    ) -> None:
        connection = Connection.from_arguments(
            app_id,
            target,
            catalogue=catalogue,
            prepare=prepare,
            infer=infer,
            max_message_bytes=max_message_bytes,
            credentials=credentials,
            app_key=app_key,
            root_certificates=root_certificates,
            certificate_chain=certificate_chain,
            private_key=private_key,
            start_server=start_server,
        )
        self.app_id = app_id
        self.transport: TransportT = self._transport_type(connection, deadlines or Deadlines(), retries or Retries())

    @property
    def deadlines(self) -> Deadlines:
        return self.transport.deadlines

    @deadlines.setter
    def deadlines(self, value: Deadlines) -> None:
        self.transport.deadlines = value

    @property
    def retries(self) -> Retries:
        return self.transport.retries

    @retries.setter
    def retries(self, value: Retries) -> None:
        self.transport.retries = value

    def for_app(self, app_id: str, app_key: str | None) -> Self:
        """This client as another app: its id and exactly this key (None: no key is sent, not even
        the local one), on the same channels (a gateway's client per caller). Close the client it
        came from, not this one."""
        clone = copy.copy(self)
        clone.app_id = app_id
        clone.transport = self.transport.for_app(app_id, app_key)
        return clone


class AiClient(_Client[Transport]):
    """A connection to the three services for one app.

    `target` is the address of a server hosting all three (the embedded `craftai serve`); pass
    `catalogue`, `prepare` and `infer` to reach separate deployments. Defaults come from
    CRAFTAI_ADDRESS, and, unless `target` is given, from CRAFTAI_CATALOGUE_ADDRESS,
    CRAFTAI_PREPARE_ADDRESS and CRAFTAI_INFER_ADDRESS for each service (so `craftai setup` works
    against separate deployments). CRAFTAI_APP_ID is not read: the app names itself. The key and
    TLS settings are described in craftai.transport; `credentials` (any grpc.ChannelCredentials)
    replaces the TLS settings when given.

    With no address anywhere, the client talks to the local server (127.0.0.1:CRAFTAI_PORT, else
    127.0.0.1:50051), and a call that finds none there starts the shared one in the background
    (craftai.local_server: one per user, stopped after CRAFTAI_SHARED_IDLE_MINUTES without a
    call), saying so in one warning; `start_server=False` (or CRAFTAI_AUTOSTART=off) never
    starts one. An address given on purpose never starts anything.
    """

    _transport_type = Transport

    @property
    def catalogue_stub(self) -> catalogue_pb2_grpc.CatalogueServiceStub:
        return self.transport.catalogue

    @property
    def prepare_stub(self) -> prepare_pb2_grpc.PrepareServiceStub:
        return self.transport.prepare

    @property
    def infer_stub(self) -> infer_pb2_grpc.InferServiceStub:
        return self.transport.infer

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> AiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    features = ops.blocking(ops.features)
    status = ops.blocking(ops.status)
    runtime = ops.blocking(ops.runtime)
    resolve = ops.blocking(ops.resolve)
    remove_background = ops.blocking(ops.remove_background)
    segment_once = ops.blocking(ops.segment_once)

    def setup(
        self,
        feature: str,
        recipe: str | None = None,
        engine: str | None = None,
        *,
        from_path: str | os.PathLike[str] | None = None,
        request_id: str | None = None,
    ) -> Generator[SetupEvent, None, None]:
        """Download, verify and prepare a route; yields Progress and Notice events, then the
        SetupOutput.

        `from_path` (a file, a folder, a zip archive such as the publisher's): the route's files are
        taken from there instead of downloaded (offline), found by size and SHA-256 and streamed
        to the prepare service, which checks every byte and places them (craftai.brought); the
        files it does not hold are checked or fetched by the service as usual (a Notice says so).
        ValueError when it holds none of them.

        Leaving the loop early does not stop the preparation on the server: the next call joins it
        (and so does a retry after the connection was lost: progress then starts again).
        """
        request_id = request_id or new_request_id()
        if from_path is None:
            events = self.transport.stream(SETUP, setup_request(feature, recipe, engine), request_id, what=SETUP_WHAT)
        else:
            resolved = self.transport.unary(RESOLVE_ROUTE, resolve_request(feature, recipe, engine), request_id)
            found, notices = bring(resolved, Path(from_path))
            yield from notices
            events = self.transport.stream(
                SETUP_FROM, lambda: upload(resolved.route, found.found), request_id, what=SETUP_WHAT
            )
        with contextlib.closing(events):
            for event in events:
                if not isinstance(event, Retrying):
                    yield setup_event(event)

    def open_session(
        self,
        picture: Picture,
        recipe: str | None = None,
        engine: str | None = None,
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> SegmentSession:
        """Send a picture once (the encoder runs now); prompt it many times with `segment`.

        The session keeps the picture's bytes: if the server has forgotten it (idle time, memory
        budget, restart), the next prompt opens it again transparently.
        """
        session = SegmentSession(self.transport, read_picture(picture), recipe or "", engine or "")
        session.open(on_progress, request_id=request_id)
        return session

    def open_cutout(
        self,
        picture: Picture,
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
        **options: Unpack[CutoutOptions],
    ) -> CutoutSession:
        """Remove the background of a picture and keep it on the server to fix with clicks:
        `keep(points=[(x, y)])` for a region the matte missed, `remove(box=(x0, y0, x1, y1))` for
        one it kept, `undo()`; `result` is the outputs after every prompt so far. The options are
        `remove_background`'s, and `segment_recipe` / `segment_engine` (craftai.cutout.opening).
        The matte and the SAM embedding are made now; close the session (or use `with`) when done."""
        session = CutoutSession(self.transport, opening(picture, **options))
        session.open(on_progress, request_id=request_id)
        return session

    def remove_background_frames(
        self,
        frames: Iterable[FrameLike],
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
        **options: Unpack[FramesOptions],
    ) -> Iterator[FrameOutput]:
        """Remove the background of a stream of frames (a video's, a camera's) over one call:
        `frames` gives numpy arrays (H, W, 3) RGB or (H, W, 4) RGBA, sent as raw pixels, or encoded
        pictures (bytes or paths), all of the first one's size; the options are remove_background's
        (sent once) and `in_flight` (frames at work at once on the server: batched there). Yields
        a FrameOutput (index, output) per frame, in order, as each is answered; the frames are
        read only as fast as answers come. Iterate it to run it; stopping early cancels the rest.
        Options are checked (ValueError) when the first answer is asked for."""
        start = starting(**options)
        reading = Reading(request_id or new_request_id(), on_progress)
        windows: list[Window] = []

        def tried() -> Iterator[FramesRequest]:
            # No frame is taken before the server's FramesStarted: a try that got no answer took
            # none of the app's, and the next one starts afresh (its sender freed from waiting).
            for old in windows:
                old.close()
            windows.append(Window())
            reading.window = windows[-1]
            return requests(start, frames, windows[-1])

        try:
            for event in self.transport.frames(MATTE_FRAMES, tried, reading.request_id):
                if (output := reading.take(event)) is not None:
                    yield output
        finally:
            for window in windows:
                window.close()  # a sender (gRPC's thread) may wait for room: the stream is over

    def resume_cutout(self, session_id: str) -> CutoutSession:
        """A cutout session opened earlier (by this app, maybe by another process: a web gateway)
        known by its id alone: `refine` goes to it, but without its picture it is not opened again
        when the server has forgotten it (NOT_FOUND / SESSION_NOT_FOUND is raised)."""
        return CutoutSession(self.transport, None, session_id)

    def resume_session(self, session_id: str) -> SegmentSession:
        """A session opened earlier (by this app, maybe by another process: a web gateway) known by
        its id alone: prompts go to it, but without its picture it is not opened again when the
        server has forgotten it (NOT_FOUND / SESSION_NOT_FOUND is raised)."""
        return SegmentSession(self.transport, None, "", "", session_id)


class AsyncAiClient(_Client[AsyncTransport]):
    """AiClient for asyncio (grpc.aio): the same arguments, methods, options, errors, retries and
    session re-opening, awaited (`setup` is an async generator, sessions are AsyncSegmentSession).
    Use it from one event loop; `async with` (or `await close()`) closes its channels."""

    _transport_type = AsyncTransport

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> AsyncAiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    features = ops.awaiting(ops.features)
    status = ops.awaiting(ops.status)
    runtime = ops.awaiting(ops.runtime)
    resolve = ops.awaiting(ops.resolve)
    remove_background = ops.awaiting(ops.remove_background)
    segment_once = ops.awaiting(ops.segment_once)

    async def setup(
        self,
        feature: str,
        recipe: str | None = None,
        engine: str | None = None,
        *,
        from_path: str | os.PathLike[str] | None = None,
        request_id: str | None = None,
    ) -> AsyncGenerator[SetupEvent, None]:
        """AiClient.setup: progress and notices, then the result (from files brought by hand with
        `from_path`, read off the event loop); leaving early never stops the preparation on the
        server."""
        request_id = request_id or new_request_id()
        if from_path is None:
            events = self.transport.stream(SETUP, setup_request(feature, recipe, engine), request_id, what=SETUP_WHAT)
        else:
            resolved = await self.transport.unary(RESOLVE_ROUTE, resolve_request(feature, recipe, engine), request_id)
            found, notices = await asyncio.to_thread(bring, resolved, Path(from_path))
            for notice in notices:
                yield notice
            events = self.transport.stream(
                SETUP_FROM, lambda: upload(resolved.route, found.found), request_id, what=SETUP_WHAT
            )
        try:
            async for event in events:
                if not isinstance(event, Retrying):
                    yield setup_event(event)
        finally:
            await events.aclose()

    async def open_session(
        self,
        picture: Picture,
        recipe: str | None = None,
        engine: str | None = None,
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> AsyncSegmentSession:
        """AiClient.open_session, awaited."""
        session = AsyncSegmentSession(self.transport, read_picture(picture), recipe or "", engine or "")
        await session.open(on_progress, request_id=request_id)
        return session

    async def open_cutout(
        self,
        picture: Picture,
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
        **options: Unpack[CutoutOptions],
    ) -> AsyncCutoutSession:
        """AiClient.open_cutout, awaited."""
        session = AsyncCutoutSession(self.transport, opening(picture, **options))
        await session.open(on_progress, request_id=request_id)
        return session

    async def remove_background_frames(
        self,
        frames: Iterable[FrameLike] | AsyncIterable[FrameLike],
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
        **options: Unpack[FramesOptions],
    ) -> AsyncIterator[FrameOutput]:
        """AiClient.remove_background_frames, as an async iterator: `frames` async or not (a
        blocking iterable is read on a worker thread)."""
        start = starting(**options)
        reading = Reading(request_id or new_request_id(), on_progress)

        def tried() -> AsyncIterator[FramesRequest]:
            window = reading.window = AsyncWindow()  # as AiClient's: no frame taken before FramesStarted
            return requests_off_the_loop(start, frames, window)

        events = self.transport.frames(MATTE_FRAMES, tried, reading.request_id)
        try:
            async for event in events:
                if (output := reading.take(event)) is not None:
                    yield output
        finally:
            await events.aclose()

    def resume_cutout(self, session_id: str) -> AsyncCutoutSession:
        """AiClient.resume_cutout: a cutout session known by its id alone (never opened again)."""
        return AsyncCutoutSession(self.transport, None, session_id)

    def resume_session(self, session_id: str) -> AsyncSegmentSession:
        """AiClient.resume_session: a session known by its id alone (never opened again)."""
        return AsyncSegmentSession(self.transport, None, "", "", session_id)
