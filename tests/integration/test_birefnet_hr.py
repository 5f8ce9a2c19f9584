"""birefnet-hr (BiRefNet_HR) on a real server: its route reads the network's side from the graph
(2048²) and answers the authors' matte at that size, on a small graph of the published contract
(craftai_dev.birefnet_rembg_fixture `hr_file`: the published file is 1.1 GB, and what the route does
around a graph is the same for every graph of the contract).

The authors' inference (`birefnet_reference.author_matte`: their tutorial's transforms, nobg's
post-processing) at 2048² is the reference, within the bounds birefnet-lite's pipeline is held to at
its own size (tests/parity/test_birefnet_pipeline_parity.py): the >0.5 masks' IoU at least 0.99, the
mean |Δα| at most 0.01. On a CPU the route admits ~12 GiB of working memory a picture (an estimate:
docs/API.md), so the server here is given a decode budget that holds it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from craftai import AiClient
from craftai_dev import birefnet_reference, servers, stand_ins
from craftai_dev.birefnet_rembg_fixture import hr_file

pytestmark = pytest.mark.slow
RECIPE = "birefnet-hr"


@pytest.fixture(scope="module")
def hr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    env = {"CRAFTAI_DECODE_BUDGET_BYTES": str(16 << 30)}
    with stand_ins.serving({RECIPE: hr_file()}, tmp_path_factory.mktemp("birefnet-hr"), [RECIPE], env) as process:
        yield process


@pytest.mark.parametrize("photo", ["chelsea.png", "astronaut.png"])
def test_the_route_answers_the_authors_matte_at_2048(
    photo: str, hr_server: servers.Process, photos: dict[str, Path]
) -> None:
    picture = np.asarray(Image.open(photos[photo]).convert("RGB"))
    with AiClient(app_id="tests", target=hr_server.address) as ai:
        answer = ai.remove_background(photos[photo], outputs="matte", recipe=RECIPE)
    ours = np.asarray(Image.open(io.BytesIO(answer.matte_png)), dtype=np.float32) / 255
    theirs = birefnet_reference.author_matte(picture, birefnet_reference.OnnxLogits(hr_file()), 2048)
    assert ours.shape == theirs.shape == picture.shape[:2]
    mine, reference = ours > 0.5, theirs > 0.5
    iou = (mine & reference).sum() / max(1, (mine | reference).sum())
    mean = float(np.abs(ours - theirs).mean())
    print(f"{photo}: IoU {iou:.4f}, mean |d| {mean:.4f}, subject share {reference.mean():.2f}")
    assert 0.05 < reference.mean() < 0.95  # a subject and a background, not one saturated value
    assert iou >= 0.99 and mean <= 0.01
