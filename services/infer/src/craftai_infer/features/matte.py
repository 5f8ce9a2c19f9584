"""image.matte: remove a picture's background.

resolve -> load (first use) -> decode (limits checked before any pixel) -> the route's MATTE
operation on its worker (batched with like pictures where the route batches) -> the matte PNG, and
the RGBA cutout when asked, encoded on the CPU pool.
"""

from __future__ import annotations

from craftai_infer.features import run as runs
from craftai_infer.features.context import MATTE_BYTES_PER_PIXEL, FeatureContext
from craftai_infer.pipelines.cutout import cutout
from craftai_infer.routes import MATTE, MatteRoute
from craftai_wire.v1 import infer_pb2

FEATURE = "image.matte"
STAGES = ("decode", "model", "encode")


class MatteFeature:
    def __init__(self, context: FeatureContext) -> None:
        self.context = context

    async def matte(self, request: infer_pb2.MatteRequest, run: runs.Run) -> infer_pb2.MatteResult:
        c = self.context
        run.stages = STAGES
        resolved = await runs.resolve(c.routes, request.route, FEATURE)
        loaded = await runs.load(c.routes, resolved, run)
        route: MatteRoute = loaded.route

        with run.stage("decode", "decoding the picture"):
            picture = await c.decoded(request.picture.data, MATTE_BYTES_PER_PIXEL)
        with run.stage("model", f"removing the background ({loaded.device})"):
            matte = await loaded.submit(MATTE, picture, run.notices, route.batch_key(picture))
        with run.stage("encode", "encoding the PNG"):
            level = c.settings.png_compress_level
            matte_png = await c.on_cpu(c.encode_png, matte, level)
            cutout_png = b""
            if request.want_cutout:
                cutout_png = await c.on_cpu(lambda: c.encode_png(cutout(picture, matte), level))

        height, width = picture.shape[:2]
        return infer_pb2.MatteResult(
            route=loaded.ref,
            matte_png=matte_png,
            cutout_png=cutout_png,
            width=width,
            height=height,
            device=loaded.device,
            timing=run.timing(),
        )
