"""Dynamic batching through the services: concurrent requests for a model that batches run as
fewer model calls, and each caller gets its own answer (the same as alone, up to float rounding)."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from craftai import AiClient
from craftai_dev import servers


def test_concurrent_mattes_on_the_torch_route_are_batched(
    tmp_path: Path, local_catalogue: Path, photos: dict[str, Path]
) -> None:
    env = {"CRAFTAI_RECIPES": str(local_catalogue), "CRAFTAI_BATCH_WINDOW_MS": "400", "CRAFTAI_MAX_BATCH": "4"}
    process = servers.embedded(tmp_path / "store", tmp_path, env)
    names = ["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg"]
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.matte", "u2netp", "torch"))
        alone = {n: ai.remove_background(photos[n], outputs="matte", engine="torch") for n in names}  # one at a time
        (route,) = ai.runtime().loaded
        assert (route.requests, route.batches) == (4, 4)
        with ThreadPoolExecutor(max_workers=4) as pool:
            together = dict(
                zip(
                    names,
                    pool.map(lambda n: ai.remove_background(photos[n], outputs="matte", engine="torch"), names),
                    strict=True,
                )
            )
        (route,) = ai.runtime().loaded
        assert route.requests == 8 and route.batches < 8, (route.requests, route.batches)
        for name in names:
            a = np.asarray(Image.open(io.BytesIO(alone[name].matte_png)), dtype=int)
            b = np.asarray(Image.open(io.BytesIO(together[name].matte_png)), dtype=int)
            assert a.shape == b.shape and np.abs(a - b).max() <= 1, name
