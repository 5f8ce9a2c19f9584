"""Parity fixtures: Meta's reference predictor on the SAM 2.1 fixture's weights (the ONNX files are
`sam21_files` in tests/conftest.py)."""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pytest

from craftai_dev import rembg_peer, sam_fixture

if TYPE_CHECKING:
    import torch

    from craftai_dev.segment import Embeddings
    from craftai_infer.pipelines.segment_sam_torch import TorchSamEmbedding
    from craftai_infer.routes.sam2_onnx import SamEmbedding, SamOnnxRunner
    from craftai_infer.routes.sam2_torch import SamTorchRunner


@pytest.fixture(scope="session")
def rembg_answers(tmp_path_factory: pytest.TempPathFactory) -> rembg_peer.Answers:
    """rembg's masks, each made once a run: suites that compare two routes of a recipe with rembg on
    the same file and picture share its answer. Under pytest-xdist in the folder the workers of this
    run share."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return rembg_peer.Answers(tmp_path_factory.getbasetemp().parent / "rembg-answers")
    return rembg_peer.Answers(tmp_path_factory.mktemp("rembg-answers"))


@pytest.fixture(scope="session")
def sam21_reference_model(sam21_files: sam_fixture.Sam21Fixture) -> Any:
    """Meta's SAM2Base with the same random weights as the ONNX files (wrap it with
    sam_fixture.reference_predictor for SAM2ImagePredictor)."""
    return sam_fixture.reference_model(sam21_files.weights)


@pytest.fixture(scope="session")
def meta_predictor(
    sam21_reference_model: Any, sam21_files: sam_fixture.Sam21Fixture, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[npt.NDArray[np.uint8]], Any]:
    """Meta's SAM2ImagePredictor with a picture set (its image encoder run), once per picture for the
    whole run: the parity suites that prompt the same photo share the reference's encoding. The first
    process to ask runs Meta's `set_image` and keeps the state it sets (its features and the
    picture's size) in the folder the workers of this run share, keyed by the weights' bytes and the
    picture's; the others put that state into a predictor of their own."""
    import torch

    from craftai_dev.files import sha256_of

    if "PYTEST_XDIST_WORKER" in os.environ:
        folder = tmp_path_factory.getbasetemp().parent / "meta-features"
    else:
        folder = tmp_path_factory.mktemp("meta-features")
    folder.mkdir(parents=True, exist_ok=True)
    weights = sha256_of(sam21_files.weights)
    done: dict[tuple[tuple[int, ...], str], Any] = {}

    def get(picture: npt.NDArray[np.uint8]) -> Any:
        key = _key(picture)
        if key not in done:
            predictor = sam_fixture.reference_predictor(sam21_reference_model)
            name = f"{weights}-{'x'.join(map(str, key[0]))}-{key[1]}"
            kept = folder / f"{name}.pt"
            with (folder / f"{name}.lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                if not kept.exists():
                    predictor.set_image(picture)
                    partial = kept.with_suffix(".part")
                    torch.save({"features": predictor._features, "orig_hw": predictor._orig_hw}, partial)
                    partial.replace(kept)
                else:
                    state = torch.load(kept)
                    predictor.reset_predictor()  # what set_image does first
                    predictor._orig_hw = state["orig_hw"]
                    predictor._features = state["features"]
                    predictor._is_image_set = True
            done[key] = predictor
        return done[key]

    return get


def _key(picture: npt.NDArray[np.uint8]) -> tuple[tuple[int, ...], str]:
    return picture.shape, hashlib.sha256(np.ascontiguousarray(picture).tobytes()).hexdigest()


@pytest.fixture(scope="session")
def sam21_converted(sam21_files: sam_fixture.Sam21Fixture) -> dict[str, torch.Tensor]:
    """The fixture's ONNX pair through the prepare service's converter (the torch route's weights), once."""
    from craftai_prepare.converters import sam21

    return sam21.convert(sam21.load_onnx(sam21_files.encoder), sam21.load_onnx(sam21_files.decoder))


@pytest.fixture(scope="session")
def sam21_torch_runner(sam21_converted: dict[str, torch.Tensor]) -> SamTorchRunner:
    """The torch route's runner on the CPU with the converted weights."""
    from craftai_infer.routes.sam2_torch import SamTorchRunner
    from craftai_models.sam2.model import build_sam21_tiny

    return SamTorchRunner(build_sam21_tiny(sam21_converted), "cpu")


@pytest.fixture(scope="session")
def torch_encoded(sam21_torch_runner: SamTorchRunner) -> Callable[[npt.NDArray[np.uint8]], TorchSamEmbedding]:
    """`sam21_torch_runner`'s embedding of a picture, once per picture for the whole session."""
    import torch

    done: dict[tuple[tuple[int, ...], str], TorchSamEmbedding] = {}

    def get(picture: npt.NDArray[np.uint8]) -> TorchSamEmbedding:
        key = _key(picture)
        if key not in done:
            with torch.inference_mode():
                done[key] = sam21_torch_runner.encode(picture)
        return done[key]

    return get


@pytest.fixture(scope="session")
def sam21_onnx_prepared(sam21_files: sam_fixture.Sam21Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The onnxruntime route's prepared graphs: the fixture's decoder edited by the prepare service's
    converter to answer token 0 too (Meta's single mask), the encoder beside it."""
    from craftai_prepare.converters import Inputs
    from craftai_prepare.converters.sam21_decoder import prepare

    folder = tmp_path_factory.mktemp("sam21-onnx-prepared")
    prepare(Inputs({"encoder": sam21_files.encoder, "decoder": sam21_files.decoder}), folder, lambda _: None)
    return folder


@pytest.fixture(scope="session")
def sam21_onnx_runner(sam21_onnx_prepared: Path) -> SamOnnxRunner:
    """The onnxruntime route's runner on the CPU with its prepared graphs."""
    from craftai_infer.routes.sam2_onnx import SamOnnxRunner
    from craftai_models.sam2.contract import PREPARED_DECODER, PREPARED_ENCODER

    return SamOnnxRunner(sam21_onnx_prepared / PREPARED_ENCODER, sam21_onnx_prepared / PREPARED_DECODER, use_gpu=False)


@pytest.fixture(scope="session")
def onnx_encoded(
    sam21_onnx_runner: SamOnnxRunner, sam21_onnx_prepared: Path, sam_onnx_embeddings: Embeddings
) -> Callable[[npt.NDArray[np.uint8]], SamEmbedding]:
    """`sam21_onnx_runner`'s embedding of a picture, once per picture for the whole run: made by
    `sam_onnx_embeddings` on the bytes of its encoder, so the suites that run the fixture's encoder
    as published share it too."""
    from craftai_models.sam2.contract import PREPARED_ENCODER

    done: dict[tuple[tuple[int, ...], str], SamEmbedding] = {}

    def get(picture: npt.NDArray[np.uint8]) -> SamEmbedding:
        key = _key(picture)
        if key not in done:
            done[key] = sam_onnx_embeddings.encoded(sam21_onnx_runner, sam21_onnx_prepared / PREPARED_ENCODER, picture)
        return done[key]

    return get
