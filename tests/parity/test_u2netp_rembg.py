"""u2netp mattes from the services equal rembg's own output on the same file and photos; the opt-in
openvino engine's are within 1/255 of it (issue 19)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, RouteState, SetupOutput
from craftai_dev import rembg_peer, servers
from craftai_dev.masks import NEAR_MASK_MIN_IOU, NEAR_MATTE_MAX_DIFF, iou


@pytest.fixture(scope="module")
def rembg_mattes(
    tmp_path_factory: pytest.TempPathFactory, photos: dict[str, Path], u2netp_file: Path
) -> dict[str, npt.NDArray[np.uint8]]:
    """rembg's `remove(only_mask=True)` of each photo, run by rembg itself in a process of its own."""
    return rembg_peer.mattes("u2netp", u2netp_file, photos, tmp_path_factory.mktemp("rembg"))


def _matte(ai: AiClient, path: Path, engine: str | None = None) -> npt.NDArray[np.uint8]:
    answer = ai.remove_background(path, outputs="matte", engine=engine)
    assert answer.engine == (engine or "onnxruntime") and answer.device == "cpu"
    return np.asarray(Image.open(io.BytesIO(answer.matte_png)))


@pytest.mark.slow
def test_mattes_equal_rembg(
    matte_server: servers.Process, photos: dict[str, Path], rembg_mattes: dict[str, npt.NDArray[np.uint8]]
) -> None:
    with AiClient(app_id="tests", target=matte_server.address) as ai:
        for name, path in photos.items():
            ours, theirs = _matte(ai, path), rembg_mattes[name]
            assert ours.shape == theirs.shape, name
            diff = np.abs(ours.astype(int) - theirs)
            assert diff.max() == 0, (name, diff.max(), diff.mean())


@pytest.mark.slow
def test_the_openvino_engine_is_within_one_level_of_rembg(
    matte_server: servers.Process, photos: dict[str, Path], rembg_mattes: dict[str, npt.NDArray[np.uint8]]
) -> None:
    """Named (`craftai setup image.matte --recipe u2netp --engine openvino`), through the real server:
    rembg's matte within 1/255 on every photo and its >0.5 mask to four decimals of IoU; and not
    byte-identical on all of them, which shows that another engine than rembg's onnxruntime made it
    (should an OpenVINO release ever match onnxruntime bit for bit, revisit this and the opt-in)."""
    pytest.importorskip("openvino", reason="the openvino engine's package (tools/bootstrap.sh --dev installs it)")
    with AiClient(app_id="tests", target=matte_server.address) as ai:
        assert "openvino" in ai.runtime().engines
        result = list(ai.setup("image.matte", "u2netp", "openvino"))[-1]
        assert isinstance(result, SetupOutput) and result.already_done  # the same file, nothing to do
        identical = []
        for name, path in photos.items():
            ours, theirs = _matte(ai, path, "openvino").astype(int), rembg_mattes[name].astype(int)
            assert ours.shape == theirs.shape, name
            assert np.abs(ours - theirs).max() <= NEAR_MATTE_MAX_DIFF, name
            assert iou(ours > 127, theirs > 127) >= NEAR_MASK_MIN_IOU, name
            assert 0.01 < float((theirs > 127).mean()) < 0.99, name  # a subject: the comparison means something
            identical.append(np.array_equal(ours, theirs))
        assert not all(identical)
        (state,) = [s for s in ai.status("image.matte", "u2netp") if s.route.engine == "openvino"]
        assert state.state == RouteState.READY and not state.needs_preparation
