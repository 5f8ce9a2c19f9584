"""AiClient: the Python SDK every app uses (one client per app id).

    from craftai import AiClient

    with AiClient(app_id="my-editor") as ai:          # the embedded server on 127.0.0.1:50051
        for event in ai.setup("image.matte"):
            print(event)
        result = ai.remove_background("photo.jpg", cutout=True)
        Path("matte.png").write_bytes(result.matte_png)

Every call has a deadline; errors are raised as `CraftAiError` with the service's plain message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc

from craftai.errors import CraftAiError
from craftai.v1 import (
    catalogue_pb2,
    catalogue_pb2_grpc,
    common_pb2,
    infer_pb2,
    infer_pb2_grpc,
    prepare_pb2,
    prepare_pb2_grpc,
)

DEFAULT_ADDRESS = "127.0.0.1:50051"
APP_ID_KEY = "craftai-app-id"
REQUEST_ID_KEY = "x-request-id"
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


@dataclass(frozen=True)
class Deadlines:
    """Seconds each kind of call may take before it is abandoned with DEADLINE_EXCEEDED."""

    unary: float = 30.0
    inference: float = 600.0
    setup: float = 6 * 3600.0


def _read_picture(picture: Picture) -> bytes:
    if isinstance(picture, bytes):
        return picture
    return Path(picture).read_bytes()


class AiClient:
    """A connection to the three services for one app.

    `target` is the address of a server hosting all three (the embedded `craftai serve`); pass
    `catalogue`, `prepare` and `infer` to reach separate deployments. Defaults come from
    CRAFTAI_ADDRESS (else 127.0.0.1:50051) and CRAFTAI_APP_ID is not read: the app names itself.
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
    ) -> None:
        if not app_id:
            raise ValueError("app_id is required: it names your app to the services")
        self.app_id = app_id
        base = target or os.environ.get("CRAFTAI_ADDRESS") or DEFAULT_ADDRESS
        self.deadlines = deadlines or Deadlines()
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        self._credentials = credentials
        self._channels: dict[str, grpc.Channel] = {}
        self.catalogue_stub = catalogue_pb2_grpc.CatalogueServiceStub(self._channel(catalogue or base))
        self.prepare_stub = prepare_pb2_grpc.PrepareServiceStub(self._channel(prepare or base))
        self.infer_stub = infer_pb2_grpc.InferServiceStub(self._channel(infer or base))

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            if self._credentials is None:
                self._channels[address] = grpc.insecure_channel(address, options=self._options)
            else:
                self._channels[address] = grpc.secure_channel(address, self._credentials, options=self._options)
        return self._channels[address]

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
        if request_id:
            items.append((REQUEST_ID_KEY, request_id))
        return tuple(items)

    def _unary(self, call: Callable[..., T], request: object) -> T:
        try:
            return call(request, timeout=self.deadlines.unary, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise CraftAiError.from_rpc(exc) from None

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
        self, feature: str, recipe: str | None = None, engine: str | None = None
    ) -> Generator[common_pb2.Progress | common_pb2.Notice | prepare_pb2.SetupResult, None, None]:
        """Download, verify and prepare a route; yields progress and notices, then the result.

        Leaving the loop early does not stop the preparation on the server: the next call joins it.
        """
        gpu = self.runtime().gpu_available
        request = prepare_pb2.SetupRequest(
            route=common_pb2.RouteRef(feature=feature, recipe=recipe or "", engine=engine or ""),
            gpu_available=gpu,
        )
        stream = self.prepare_stub.Setup(request, timeout=self.deadlines.setup, metadata=self._metadata())
        try:
            for event in stream:
                kind = event.WhichOneof("event")
                if kind == "progress":
                    yield event.progress
                elif kind == "notice":
                    yield event.notice
                elif kind == "result":
                    yield event.result
                    return
        except grpc.RpcError as exc:
            raise CraftAiError.from_rpc(exc) from None
        finally:
            stream.cancel()

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
        try:
            stream = self.infer_stub.Matte(
                request, timeout=self.deadlines.inference, metadata=self._metadata(request_id)
            )
            for event in stream:
                kind = event.WhichOneof("event")
                if kind == "progress" and on_progress is not None:
                    on_progress(event.progress)
                elif kind == "notice":
                    notices.append(event.notice.message)
                elif kind == "result":
                    r = event.result
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
                    )
        except grpc.RpcError as exc:
            raise CraftAiError.from_rpc(exc) from None
        raise CraftAiError(grpc.StatusCode.INTERNAL, "the stream ended without a result")
