"""AiClient: the Python SDK every app uses (one client per app id).

    from craftai import AiClient

    with AiClient(app_id="my-editor") as ai:          # the embedded server on 127.0.0.1:50051
        for event in ai.setup("image.matte"):
            print(event)
        result = ai.remove_background("photo.jpg", cutout=True)
        Path("matte.png").write_bytes(result.matte_png)
        with ai.open_session("photo.jpg") as picture:   # the encoder runs once, here
            first = picture.segment(points=[(310, 200, True)])
            better = picture.segment(points=[(310, 200, True), (40, 40, False)], mask_input=first.best.low_res)
            Path("mask.png").write_bytes(better.best.png)

Every call has a deadline; errors are raised as `CraftAiError` with the service's plain message.
A call the server could not answer (UNAVAILABLE: the connection was lost, the server restarted or
is shutting down) is tried again once the server is reachable again (`Retries`: up to 3 more
tries, waiting 20 s at most for the server); every other error is raised at once.

Credentials: the app's key is `app_key`, else CRAFTAI_APP_KEY, else (for loopback addresses only)
the local key that `craftai serve` generated (craftai_wire.keys). TLS: `root_certificates` (or
CRAFTAI_TLS_CA), and for mutual TLS `certificate_chain` and `private_key` (or
CRAFTAI_TLS_CLIENT_CERT and CRAFTAI_TLS_CLIENT_KEY), each PEM bytes or a file path.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from craftai.errors import CraftAiError
from craftai_wire.channels import client_options
from craftai_wire.keys import is_loopback, local_key_file, read_key_file
from craftai_wire.metadata import APP_ID_KEY, APP_KEY_KEY, REQUEST_ID_KEY
from craftai_wire.v1 import (
    catalogue_pb2,
    catalogue_pb2_grpc,
    common_pb2,
    infer_pb2,
    infer_pb2_grpc,
    prepare_pb2,
    prepare_pb2_grpc,
)

DEFAULT_ADDRESS = "127.0.0.1:50051"
MiB = 1 << 20
Picture = bytes | str | os.PathLike[str]
ProgressCallback = Callable[[common_pb2.Progress], None]
T = TypeVar("T")


@dataclass(frozen=True)
class MatteOutput:
    """A removed background: the matte (and cutout) PNGs at the picture's size."""

    matte_png: bytes
    cutout_png: bytes
    width: int
    height: int
    recipe: str
    engine: str
    device: str
    timing_ms: dict[str, float] = field(default_factory=dict)
    server_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    request_id: str = ""


@dataclass(frozen=True)
class Retries:
    """How a call the server could not answer (UNAVAILABLE: the connection was lost, the server is
    restarting or shutting down) is tried again: up to `attempts` more times, each after `backoff`
    seconds (doubled each time, at most `max_backoff`; or the server's RetryInfo) and after the
    server is reachable again, waiting for that `wait_seconds` at most in all. A server this client
    never reached is not waited for: the error is raised at once (no server there)."""

    attempts: int = 3
    backoff: float = 0.25
    max_backoff: float = 5.0
    wait_seconds: float = 20.0


@dataclass(frozen=True)
class Deadlines:
    """Seconds each kind of call may take before it is abandoned with DEADLINE_EXCEEDED."""

    unary: float = 30.0
    inference: float = 600.0
    setup: float = 6 * 3600.0


@dataclass(frozen=True)
class Point:
    """A click in picture pixels (x to the right, y down, origin at the top-left corner)."""

    x: float
    y: float
    foreground: bool = True


@dataclass(frozen=True)
class LowResMask:
    """Low-res mask logits as answered (float32 little-endian, row-major, 256x256); feed one back
    as `mask_input` to refine the next prompt on the same picture."""

    logits: bytes
    width: int = 256
    height: int = 256


@dataclass(frozen=True)
class MaskOutput:
    """One mask: a 1-bit grayscale PNG at the picture's size. `empty` is True when it selects
    nothing (an answer, not an error); `selected_fraction` is the share of pixels selected."""

    png: bytes
    predicted_iou: float
    empty: bool
    selected_fraction: float
    low_res: LowResMask


@dataclass(frozen=True)
class SegmentOutput:
    """The answer to one prompt: masks best first (three when all were asked, else one)."""

    masks: list[MaskOutput]
    width: int
    height: int
    recipe: str
    engine: str
    device: str
    session_id: str = ""
    timing_ms: dict[str, float] = field(default_factory=dict)
    server_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    reopened: bool = False  # the session had been forgotten and was opened again with the picture
    request_id: str = ""

    @property
    def best(self) -> MaskOutput:
        return self.masks[0]


PointLike = Point | tuple[float, float, bool] | tuple[float, float]
MaskInput = LowResMask | bytes | None


def _prompt(
    points: Iterable[PointLike], box: Sequence[float] | None, mask_input: MaskInput, all_masks: bool
) -> infer_pb2.Prompt:
    prompt = infer_pb2.Prompt(all_masks=all_masks)
    for point in points:
        p = point if isinstance(point, Point) else Point(*point)
        label = infer_pb2.POINT_LABEL_FOREGROUND if p.foreground else infer_pb2.POINT_LABEL_BACKGROUND
        prompt.points.append(infer_pb2.Point(x=p.x, y=p.y, label=label))
    if box is not None:
        if len(box) != 4:
            raise ValueError(f"a box is four numbers (x0, y0, x1, y1); got {len(box)}")
        x0, y0, x1, y1 = box
        prompt.box.CopyFrom(infer_pb2.Box(x0=x0, y0=y0, x1=x1, y1=y1))
    if mask_input is not None:
        low = mask_input if isinstance(mask_input, LowResMask) else LowResMask(bytes(mask_input))
        prompt.mask_input.CopyFrom(infer_pb2.LowResMask(logits=low.logits, width=low.width, height=low.height))
    return prompt


def _segment_output(
    r: infer_pb2.SegmentResult, notices: list[str], reopened: bool = False, request_id: str = ""
) -> SegmentOutput:
    return SegmentOutput(
        masks=[
            MaskOutput(
                png=m.png,
                predicted_iou=m.predicted_iou,
                empty=m.empty,
                selected_fraction=m.selected_fraction,
                low_res=LowResMask(m.low_res.logits, m.low_res.width, m.low_res.height),
            )
            for m in r.masks
        ],
        width=r.width,
        height=r.height,
        recipe=r.route.recipe,
        engine=r.route.engine,
        device=r.device,
        session_id=r.session_id,
        timing_ms=dict(r.timing.stages_ms),
        server_ms=r.timing.total_ms,
        notices=notices,
        reopened=reopened,
        request_id=request_id,
    )


def _read_picture(picture: Picture) -> bytes:
    if isinstance(picture, bytes):
        return picture
    return Path(picture).read_bytes()


def _pem(value: bytes | str | os.PathLike[str] | None, variable: str) -> bytes | None:
    """PEM bytes as given, or read from a path (the argument, else the environment variable)."""
    if value is None:
        value = os.environ.get(variable) or None
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def _new_request_id() -> str:
    return uuid.uuid4().hex


def _unanswered(error: CraftAiError) -> bool:
    """UNAVAILABLE from the channel (connection lost, server down or restarting) or from a server
    that is shutting down: worth another try. An UNAVAILABLE the service answered with a reason
    (e.g. SOURCES_FAILED: every download source failed) is an answer, not retried."""
    return error.code == grpc.StatusCode.UNAVAILABLE and error.reason in ("", "SHUTTING_DOWN")


class AiClient:
    """A connection to the three services for one app.

    `target` is the address of a server hosting all three (the embedded `craftai serve`); pass
    `catalogue`, `prepare` and `infer` to reach separate deployments. Defaults come from
    CRAFTAI_ADDRESS (else 127.0.0.1:50051), and, unless `target` is given, from
    CRAFTAI_CATALOGUE_ADDRESS, CRAFTAI_PREPARE_ADDRESS and CRAFTAI_INFER_ADDRESS for each service
    (so `craftai setup` works against separate deployments). CRAFTAI_APP_ID is not read: the app
    names itself. The key and TLS settings are described at the top of this module; `credentials`
    (any grpc.ChannelCredentials) replaces the TLS settings when given.
    """

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
    ) -> None:
        if not app_id:
            raise ValueError("app_id is required: it names your app to the services")
        self.app_id = app_id
        base = target or os.environ.get("CRAFTAI_ADDRESS") or DEFAULT_ADDRESS
        self.deadlines = deadlines or Deadlines()
        self.retries = retries or Retries()
        self._options = client_options(max_message_bytes)
        if credentials is None:
            roots = _pem(root_certificates, "CRAFTAI_TLS_CA")
            chain = _pem(certificate_chain, "CRAFTAI_TLS_CLIENT_CERT")
            key = _pem(private_key, "CRAFTAI_TLS_CLIENT_KEY")
            if (chain is None) != (key is None):
                raise ValueError("a client certificate needs its private key (and the key its certificate)")
            if roots is not None or chain is not None:
                credentials = grpc.ssl_channel_credentials(roots, key, chain)
        self._credentials = credentials
        addresses = [a or base for a in (catalogue, prepare, infer)]
        self._app_key = app_key or os.environ.get("CRAFTAI_APP_KEY") or None
        if self._app_key is None and all(is_loopback(a) for a in addresses):
            self._app_key = read_key_file(local_key_file())
        self._channels: dict[str, grpc.Channel] = {}
        env = os.environ.get
        self._reached: set[str] = set()  # addresses whose channel was READY once
        self._addresses = {
            "catalogue": catalogue or (None if target else env("CRAFTAI_CATALOGUE_ADDRESS")) or base,
            "prepare": prepare or (None if target else env("CRAFTAI_PREPARE_ADDRESS")) or base,
            "infer": infer or (None if target else env("CRAFTAI_INFER_ADDRESS")) or base,
        }
        self.catalogue_stub = catalogue_pb2_grpc.CatalogueServiceStub(self._channel(self._addresses["catalogue"]))
        self.prepare_stub = prepare_pb2_grpc.PrepareServiceStub(self._channel(self._addresses["prepare"]))
        self.infer_stub = infer_pb2_grpc.InferServiceStub(self._channel(self._addresses["infer"]))

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            if self._credentials is None:
                channel = grpc.insecure_channel(address, options=self._options)
            else:
                channel = grpc.secure_channel(address, self._credentials, options=self._options)

            def seen(state: grpc.ChannelConnectivity, address: str = address) -> None:
                if state == grpc.ChannelConnectivity.READY:
                    self._reached.add(address)

            channel.subscribe(seen)
            self._channels[address] = channel
        return self._channels[address]

    def _address_of(self, call: object) -> str:
        """The address a stub method calls (the stubs keep their methods as attributes)."""
        for name, stub in (
            ("infer", self.infer_stub),
            ("catalogue", self.catalogue_stub),
            ("prepare", self.prepare_stub),
        ):
            if any(call is method for method in vars(stub).values()):
                return self._addresses[name]
        return self._addresses["infer"]

    def _wait_again(self, address: str, error: CraftAiError, attempt: int, waited: float) -> float:
        """Before another try: raise `error` when it is not worth one; else sleep the backoff, wait
        (within what is left of `wait_seconds`) for the server to be reachable, and return the
        seconds waited so far."""
        policy = self.retries
        if not _unanswered(error) or attempt >= policy.attempts or address not in self._reached:
            raise error
        started = time.monotonic()
        backoff = min(policy.backoff * 2**attempt, policy.max_backoff)
        time.sleep(min(error.retry_after if error.retry_after is not None else backoff, policy.max_backoff))
        left = policy.wait_seconds - waited - (time.monotonic() - started)
        ready = grpc.channel_ready_future(self._channels[address])
        try:
            ready.result(timeout=max(left, 0.0))
        except grpc.FutureTimeoutError:
            ready.cancel()
            raise error from None
        return waited + time.monotonic() - started

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> AiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _metadata(self, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
        items = [(APP_ID_KEY, self.app_id)]
        if self._app_key:
            items.append((APP_KEY_KEY, self._app_key))
        if request_id:
            items.append((REQUEST_ID_KEY, request_id))
        return tuple(items)

    def _retrying(self, address: str, once: Callable[[], T]) -> T:
        """Run `once()`; again after UNAVAILABLE, once the server is reachable (Retries)."""
        waited = 0.0
        attempt = 0
        while True:
            try:
                return once()
            except CraftAiError as exc:
                waited = self._wait_again(address, exc, attempt, waited)
                attempt += 1

    def _unary(self, call: Callable[..., T], request: object, request_id: str | None = None) -> T:
        metadata = self._metadata(request_id or _new_request_id())

        def once() -> T:
            try:
                return call(request, timeout=self.deadlines.unary, metadata=metadata)
            except grpc.RpcError as exc:
                raise CraftAiError.from_rpc(exc) from None

        return self._retrying(self._address_of(call), once)

    def _stream(
        self,
        call: Callable[..., Any],
        request: object,
        on_progress: ProgressCallback | None,
        notices: list[str],
        request_id: str,
    ) -> object:
        """Run an inference stream to its one result (progress to the callback, notices collected)."""
        metadata = self._metadata(request_id)

        def once() -> object:
            del notices[:]  # a retry starts the answer again
            stream = call(request, timeout=self.deadlines.inference, metadata=metadata)
            result = None
            try:
                for event in stream:  # read to the end: the result is the last message, then the status
                    kind = event.WhichOneof("event")
                    if kind == "progress" and on_progress is not None:
                        on_progress(event.progress)
                    elif kind == "notice":
                        notices.append(event.notice.message)
                    elif kind == "result":
                        result = event.result
            except grpc.RpcError as exc:
                if result is None:
                    raise CraftAiError.from_rpc(exc) from None
            finally:
                stream.cancel()  # a no-op once the stream ended; stops the server's work otherwise
            if result is not None:
                return result
            raise CraftAiError(grpc.StatusCode.INTERNAL, "the stream ended without a result", request_id=request_id)

        return self._retrying(self._address_of(call), once)

    # -- catalogue and runtime -----------------------------------------------------------

    def features(self) -> list[catalogue_pb2.Feature]:
        reply = self._unary(self.catalogue_stub.ListFeatures, catalogue_pb2.ListFeaturesRequest())
        return list(reply.features)

    def status(self, feature: str = "", recipe: str = "") -> list[catalogue_pb2.RouteStatus]:
        request = catalogue_pb2.GetRouteStatesRequest(feature=feature, recipe=recipe)
        return list(self._unary(self.catalogue_stub.GetRouteStates, request).routes)

    def runtime(self) -> infer_pb2.Runtime:
        return self._unary(self.infer_stub.GetRuntime, infer_pb2.GetRuntimeRequest())

    def resolve(
        self, feature: str, recipe: str | None = None, engine: str | None = None
    ) -> catalogue_pb2.ResolveRouteResponse:
        """The route the services would use on the infer service's machine (engine advice)."""
        gpu = self.runtime().gpu_available
        request = catalogue_pb2.ResolveRouteRequest(
            route=common_pb2.RouteRef(feature=feature, recipe=recipe or "", engine=engine or ""),
            machine=catalogue_pb2.MachineInfo(gpu_available=gpu),
        )
        return self._unary(self.catalogue_stub.ResolveRoute, request)

    # -- setup ---------------------------------------------------------------------------

    def setup(
        self, feature: str, recipe: str | None = None, engine: str | None = None, *, request_id: str | None = None
    ) -> Generator[common_pb2.Progress | common_pb2.Notice | prepare_pb2.SetupResult, None, None]:
        """Download, verify and prepare a route; yields progress and notices, then the result.

        Leaving the loop early does not stop the preparation on the server: the next call joins it
        (and so does a retry after the connection was lost: progress then starts again).
        """
        gpu = self.runtime().gpu_available
        request = prepare_pb2.SetupRequest(
            route=common_pb2.RouteRef(feature=feature, recipe=recipe or "", engine=engine or ""),
            gpu_available=gpu,
        )
        metadata = self._metadata(request_id or _new_request_id())
        waited = 0.0
        attempt = 0
        while True:
            stream = self.prepare_stub.Setup(request, timeout=self.deadlines.setup, metadata=metadata)
            done = False
            error = CraftAiError(grpc.StatusCode.INTERNAL, "the setup stream ended without a result")
            try:
                for event in stream:  # read to the end, so that the server sees the call finish
                    kind = event.WhichOneof("event")
                    if kind == "progress":
                        yield event.progress
                    elif kind == "notice":
                        yield event.notice
                    elif kind == "result":
                        done = True
                        yield event.result
            except grpc.RpcError as exc:
                if not done:
                    error = CraftAiError.from_rpc(exc)
            finally:
                stream.cancel()
            if done:
                return
            waited = self._wait_again(self._addresses["prepare"], error, attempt, waited)
            attempt += 1

    # -- image.matte ---------------------------------------------------------------------

    def remove_background(
        self,
        picture: Picture,
        *,
        cutout: bool = False,
        recipe: str | None = None,
        engine: str | None = None,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> MatteOutput:
        """The matte (white = subject) of a PNG, JPEG or WebP picture, and the cutout if asked."""
        request = infer_pb2.MatteRequest(
            route=common_pb2.RouteRef(feature="image.matte", recipe=recipe or "", engine=engine or ""),
            picture=common_pb2.Picture(data=_read_picture(picture)),
            want_cutout=cutout,
        )
        notices: list[str] = []
        request_id = request_id or _new_request_id()
        r = self._stream(self.infer_stub.Matte, request, on_progress, notices, request_id)
        assert isinstance(r, infer_pb2.MatteResult)
        return MatteOutput(
            matte_png=r.matte_png,
            cutout_png=r.cutout_png,
            width=r.width,
            height=r.height,
            recipe=r.route.recipe,
            engine=r.route.engine,
            device=r.device,
            timing_ms=dict(r.timing.stages_ms),
            server_ms=r.timing.total_ms,
            notices=notices,
            request_id=request_id,
        )

    # -- image.segment -------------------------------------------------------------------

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
        session = SegmentSession(self, _read_picture(picture), recipe or "", engine or "")
        session.open(on_progress, request_id=request_id)
        return session

    def segment_once(
        self,
        picture: Picture,
        points: Iterable[PointLike] = (),
        box: Sequence[float] | None = None,
        mask_input: MaskInput = None,
        all_masks: bool = False,
        *,
        recipe: str | None = None,
        engine: str | None = None,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> SegmentOutput:
        """Picture and prompt in one call; nothing is kept on the server (the encoder runs each time)."""
        request = infer_pb2.SegmentOnceRequest(
            route=common_pb2.RouteRef(feature="image.segment", recipe=recipe or "", engine=engine or ""),
            picture=common_pb2.Picture(data=_read_picture(picture)),
            prompt=_prompt(points, box, mask_input, all_masks),
        )
        notices: list[str] = []
        request_id = request_id or _new_request_id()
        result = self._stream(self.infer_stub.SegmentOnce, request, on_progress, notices, request_id)
        assert isinstance(result, infer_pb2.SegmentResult)
        return _segment_output(result, notices, request_id=request_id)


class SegmentSession:
    """A picture kept on the server for prompts; close it (or use `with`) when done.

    The picture's bytes stay here, so a prompt after the server forgot the session (idle time,
    memory budget, restart) or after `close()` opens it again first. Not thread-safe: one app
    thread prompts one session at a time.
    """

    def __init__(self, client: AiClient, picture: bytes, recipe: str, engine: str) -> None:
        self._client = client
        self._picture = picture
        self._recipe = recipe
        self._engine = engine
        self.session_id = ""
        self.width = 0
        self.height = 0
        self.device = ""
        self.idle_seconds = 0.0
        self.timing_ms: dict[str, float] = {}
        self.notices: list[str] = []  # notices of the last opening (e.g. FELL_BACK_TO_CPU)
        self.reopened = 0  # how many times the server had forgotten it and it was opened again

    @property
    def recipe(self) -> str:
        return self._recipe

    @property
    def engine(self) -> str:
        return self._engine

    def open(self, on_progress: ProgressCallback | None = None, *, request_id: str | None = None) -> None:
        """(Re)open on the server with the kept picture bytes; the route answered first is kept."""
        request = infer_pb2.OpenSessionRequest(
            route=common_pb2.RouteRef(feature="image.segment", recipe=self._recipe, engine=self._engine),
            picture=common_pb2.Picture(data=self._picture),
        )
        self.notices = []
        result = self._client._stream(
            self._client.infer_stub.OpenSession,
            request,
            on_progress,
            self.notices,
            request_id or _new_request_id(),
        )
        assert isinstance(result, infer_pb2.OpenSessionResult)
        self.session_id = result.session_id
        self.width, self.height = result.width, result.height
        self._recipe, self._engine = result.route.recipe, result.route.engine
        self.device = result.device
        self.idle_seconds = result.idle_seconds
        self.timing_ms = dict(result.timing.stages_ms)

    def segment(
        self,
        points: Iterable[PointLike] = (),
        box: Sequence[float] | None = None,
        mask_input: MaskInput = None,
        all_masks: bool = False,
        *,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> SegmentOutput:
        """Masks for a prompt: points (x, y, foreground?) and/or a box (x0, y0, x1, y1) in picture
        pixels, optionally a previous answer's `low_res` to refine; best mask first.

        A session the server no longer has (evicted, idle too long, or the server restarted: the
        SDK waits for it to come back) is opened again with the kept picture, then prompted."""
        prompt = _prompt(list(points), box, mask_input, all_masks)
        request_id = request_id or _new_request_id()
        reopened = False
        if not self.session_id:
            self.open(on_progress, request_id=request_id)
            reopened = True
        while True:
            request = infer_pb2.SegmentRequest(session_id=self.session_id, prompt=prompt)
            notices: list[str] = []
            try:
                result = self._client._stream(
                    self._client.infer_stub.Segment, request, on_progress, notices, request_id
                )
            except CraftAiError as exc:
                if reopened or exc.code != grpc.StatusCode.NOT_FOUND or exc.reason != "SESSION_NOT_FOUND":
                    raise
                self.open(on_progress, request_id=request_id)  # evicted, expired or restarted: send it again
                self.reopened += 1
                reopened = True
                continue
            assert isinstance(result, infer_pb2.SegmentResult)
            return _segment_output(result, notices, reopened, request_id)

    def close(self) -> None:
        """Forget the picture on the server (nothing happens if it is already gone)."""
        if self.session_id:
            request = infer_pb2.CloseSessionRequest(session_id=self.session_id)
            self.session_id = ""
            self._client._unary(self._client.infer_stub.CloseSession, request)

    def __enter__(self) -> SegmentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
