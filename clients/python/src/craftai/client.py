"""AiClient: the Python SDK every app uses (one client per app id).

    from craftai import AiClient

    with AiClient(app_id="my-editor") as ai:          # the embedded server on 127.0.0.1:50051
        for event in ai.setup("image.matte"):
            print(event)
        result = ai.remove_background("photo.jpg", outputs="matte,cutout,composite", bg_color="#2a6df4")
        Path("matte.png").write_bytes(result.matte_png)
        Path("cutout.png").write_bytes(result.cutout.data)    # hair keeps its colour, not the old background's
        with ai.open_session("photo.jpg") as picture:   # the encoder runs once, here
            first = picture.segment(points=[(310, 200, True)])
            better = picture.segment(points=[(310, 200, True), (40, 40, False)], mask_input=first.best.low_res)
            Path("mask.png").write_bytes(better.best.png)

Every call has a deadline; errors are raised as `CraftAiError` with the service's plain message.
A call the server could not answer (UNAVAILABLE: the connection was lost, the server restarted or
is shutting down) is tried again once the server is reachable again (`Retries`: up to 3 more
tries, waiting 20 s at most for the server); every other error is raised at once.

Credentials and TLS are described in craftai.transport. The parts: outputs (what an app gets back),
calls (the RPCs and their requests, built by pure functions), policy (deadlines, retries),
transport (channels, metadata, the retry loop, the one stream reader), session (SegmentSession).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterable, Mapping, Sequence

import grpc

from craftai import calls
from craftai.calls import Picture
from craftai.outputs import (
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
    matte_output,
    segment_output,
)
from craftai.policy import Deadlines, Retries, Retrying
from craftai.session import SegmentSession
from craftai.transport import DEFAULT_ADDRESS, Connection, MiB, ProgressCallback, Transport, new_request_id
from craftai_wire.v1 import (
    catalogue_pb2,
    catalogue_pb2_grpc,
    common_pb2,
    infer_pb2,
    infer_pb2_grpc,
    prepare_pb2,
    prepare_pb2_grpc,
)

__all__ = [
    "DEFAULT_ADDRESS",
    "AiClient",
    "Deadlines",
    "EncodedImage",
    "EverythingOutput",
    "LowResMask",
    "MaskFormat",
    "MaskInput",
    "MaskOutput",
    "MatteOutput",
    "MiB",
    "Picture",
    "Point",
    "PointLike",
    "Polygon",
    "ProgressCallback",
    "Prompt",
    "Retries",
    "Rle",
    "SegmentOutput",
    "SegmentSession",
]


class AiClient:
    """A connection to the three services for one app.

    `target` is the address of a server hosting all three (the embedded `craftai serve`); pass
    `catalogue`, `prepare` and `infer` to reach separate deployments. Defaults come from
    CRAFTAI_ADDRESS (else 127.0.0.1:50051), and, unless `target` is given, from
    CRAFTAI_CATALOGUE_ADDRESS, CRAFTAI_PREPARE_ADDRESS and CRAFTAI_INFER_ADDRESS for each service
    (so `craftai setup` works against separate deployments). CRAFTAI_APP_ID is not read: the app
    names itself. The key and TLS settings are described in craftai.transport; `credentials`
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
        )
        self.app_id = app_id
        self.transport = Transport(connection, deadlines or Deadlines(), retries or Retries())

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

    # -- catalogue and runtime -----------------------------------------------------------

    def features(self) -> list[catalogue_pb2.Feature]:
        return list(self.transport.unary(calls.LIST_FEATURES, catalogue_pb2.ListFeaturesRequest()).features)

    def status(self, feature: str = "", recipe: str = "") -> list[catalogue_pb2.RouteStatus]:
        request = catalogue_pb2.GetRouteStatesRequest(feature=feature, recipe=recipe)
        return list(self.transport.unary(calls.GET_ROUTE_STATES, request).routes)

    def runtime(self) -> infer_pb2.Runtime:
        return self.transport.unary(calls.GET_RUNTIME, infer_pb2.GetRuntimeRequest())

    def resolve(
        self, feature: str, recipe: str | None = None, engine: str | None = None
    ) -> catalogue_pb2.ResolveRouteResponse:
        """The route the services would use on the infer service's machine (engine advice: the
        catalogue asks the infer service what it runs on; `reason` says what it found)."""
        return self.transport.unary(calls.RESOLVE_ROUTE, calls.resolve_request(feature, recipe, engine))

    # -- setup ---------------------------------------------------------------------------

    def setup(
        self, feature: str, recipe: str | None = None, engine: str | None = None, *, request_id: str | None = None
    ) -> Generator[common_pb2.Progress | common_pb2.Notice | prepare_pb2.SetupResult, None, None]:
        """Download, verify and prepare a route; yields progress and notices, then the result.

        Leaving the loop early does not stop the preparation on the server: the next call joins it
        (and so does a retry after the connection was lost: progress then starts again).
        """
        request = calls.setup_request(feature, recipe, engine)
        events = self.transport.stream(calls.SETUP, request, request_id or new_request_id(), what="the setup stream")
        with contextlib.closing(events):
            for event in events:
                if not isinstance(event, Retrying):
                    yield event

    # -- image.matte ---------------------------------------------------------------------

    def remove_background(
        self,
        picture: Picture,
        *,
        cutout: bool = False,
        outputs: str | Iterable[str] | None = None,
        naive: bool = False,
        bg_color: calls.Colour | None = None,
        bg_blur: float | None = None,
        bg_image: Picture | None = None,
        threshold: float | None = None,
        format: str | Mapping[str, str] | None = None,
        png_level: int | None = None,
        jpeg_quality: int | None = None,
        recipe: str | None = None,
        engine: str | None = None,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> MatteOutput:
        """Remove the background of a PNG, JPEG or WebP picture (bytes or a path); one request.

        outputs: any of "matte" (8-bit grayscale, white = subject), "cutout" (RGBA; the subject's
        colours estimated so that hair and fur lose the old background's tint, or the picture's
        own with `naive=True`), "composite" (the subject over `bg_color` ("#rrggbb[aa]" or
        (r, g, b[, a])), a blur of the picture of `bg_blur` pixels, or `bg_image`, scaled to
        cover; white when none is given), "mask" (alpha > `threshold`, default 0.5) — as a list
        or "matte,cutout". Without `outputs`: the matte, plus the cutout when `cutout=True`, the
        composite when a background is given, the mask when a threshold is.
        format: "png" (default), "webp" (lossless) or "jpeg" (the composite only, over an opaque
        background), or one per output ({"composite": "jpeg", "matte": "webp"}); `png_level`
        0..9 (the server's default: 1, fast), `jpeg_quality` 1..100 (90).
        Returns each output asked as an `EncodedImage` (`result.cutout.data`); `matte_png` and
        `cutout_png` are the PNG bytes (b"" when not asked). Bad options raise ValueError.
        """
        options = calls.matte_options(
            outputs=outputs,
            cutout=cutout,
            naive=naive,
            bg_color=bg_color,
            bg_blur=bg_blur,
            bg_image=calls.read_picture(bg_image) if bg_image is not None else None,
            threshold=threshold,
            format=format,
            png_level=png_level,
            jpeg_quality=jpeg_quality,
        )
        request = calls.matte_request(calls.read_picture(picture), options, recipe, engine)
        notices: list[str] = []
        request_id = request_id or new_request_id()
        result = self.transport.result(calls.MATTE, request, on_progress, notices, request_id)
        return matte_output(result, notices, request_id)

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
        session = SegmentSession(self.transport, calls.read_picture(picture), recipe or "", engine or "")
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
        prompts: Sequence[Prompt] | None = None,
        formats: Iterable[MaskFormat] | MaskFormat | None = None,
        polygon_tolerance: float | None = None,
        max_hole_area: int = 0,
        max_sprinkle_area: int = 0,
        single_mask_like_meta: bool = False,
        recipe: str | None = None,
        engine: str | None = None,
        on_progress: ProgressCallback | None = None,
        request_id: str | None = None,
    ) -> SegmentOutput:
        """Picture and prompt(s) in one call; nothing is kept on the server (the encoder runs each
        time). The prompt and output arguments are SegmentSession.segment's."""
        request = calls.segment_once_request(
            calls.read_picture(picture),
            calls.prompts(points, box, mask_input, all_masks, prompts, single_mask_like_meta=single_mask_like_meta),
            recipe,
            engine,
            calls.mask_output(formats, polygon_tolerance, max_hole_area, max_sprinkle_area),
        )
        notices: list[str] = []
        request_id = request_id or new_request_id()
        result = self.transport.result(calls.SEGMENT_ONCE, request, on_progress, notices, request_id)
        return segment_output(result, notices, request_id=request_id)
