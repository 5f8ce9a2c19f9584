"""image.matte: remove a picture's background, and make what the app asked from the matte.

options checked (matte_options: before any work) -> resolve -> load (first use) -> decode (the
picture, and a background picture if one came; limits checked before any pixel) -> the route's
MATTE operation on its worker (batched with like pictures where the route batches): the matte,
then the cutout, composite and mask made from it on the route's device -> each output encoded
(PNG, WebP or JPEG) on the CPU pool, at the same time.
"""

from __future__ import annotations

import asyncio

from craftai_common.errors import ServiceError
from craftai_infer import matte_options
from craftai_infer.encodings import Format
from craftai_infer.features import run as runs
from craftai_infer.features.context import FeatureContext
from craftai_infer.pictures import Picture
from craftai_infer.pipelines.matte_spec import Kind, Rendered
from craftai_infer.routes import MATTE, MatteJob, MatteRoute
from craftai_wire.v1 import infer_pb2

FEATURE = "image.matte"
STAGES = ("decode", "model", "encode")


class MatteFeature:
    def __init__(self, context: FeatureContext) -> None:
        self.context = context

    async def matte(self, request: infer_pb2.MatteRequest, run: runs.Run) -> infer_pb2.MatteResult:
        c = self.context
        asked = matte_options.check(request, c.settings.png_compress_level)
        run.stages = STAGES
        resolved = await runs.resolve(c.routes, request.route, FEATURE)
        loaded = await runs.load(c.routes, resolved, run)
        route: MatteRoute = loaded.route

        with run.stage("decode", "decoding the picture"):
            picture = await c.on_cpu(c.decode, request.picture.data)
            background = None
            if asked.background_picture is not None:
                background = await c.on_cpu(self._background, asked.background_picture)
        height, width = picture.shape[:2]
        spec = asked.within(width, height, background)
        made = [kind for kind in asked.kinds if kind != "matte"]
        doing = "removing the background" + (f" and making the {', '.join(made)}" if made else "")
        with run.stage("model", f"{doing} ({loaded.device})"):
            job = MatteJob(picture, spec)
            rendered: Rendered = await loaded.submit(MATTE, job, run.notices, route.batch_key(picture))
        with run.stage("encode", f"encoding the {', '.join(asked.kinds)}"):
            encoded = await asyncio.gather(
                *(c.on_cpu(c.encode, getattr(rendered, kind), asked.encodings[kind]) for kind in asked.kinds)
            )
        images = dict(zip(asked.kinds, encoded, strict=True))
        result = infer_pb2.MatteResult(
            route=loaded.ref, width=width, height=height, device=loaded.device, timing=run.timing()
        )
        if asked.legacy:
            result.matte_png = images["matte"]
            result.cutout_png = images.get("cutout", b"")
        else:
            for kind, data in images.items():
                getattr(result, kind).CopyFrom(_image(kind, data, asked.encodings[kind].format, rendered))
        return result

    def _background(self, data: bytes) -> Picture:
        """The background picture, decoded as the picture is; its refusals name its own field."""
        try:
            return self.context.decode(data)
        except ServiceError as error:
            field = "background.picture.data"
            raise ServiceError(
                error.code,
                error.reason,
                f"the background picture: {error.message}",
                metadata=error.metadata,
                violations=[(field, f"the background picture: {error.message}")] if error.violations else [],
            ) from error


def _image(kind: Kind, data: bytes, fmt: Format, rendered: Rendered) -> infer_pb2.MatteImage:
    pixels = getattr(rendered, kind)
    has_alpha = kind == "cutout" or (kind == "composite" and pixels.shape[2] == 4)
    return infer_pb2.MatteImage(data=data, format=matte_options.FORMAT_VALUES[fmt], has_alpha=has_alpha)
