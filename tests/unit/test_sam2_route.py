"""The SAM 2 / 2.1 tiny onnxruntime route: both recipes, the CPU here, other files refused in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from craftai_dev.sam_fixture import Sam21Fixture
from craftai_infer.routes import ModelRefusedError, RouteFiles
from craftai_infer.routes.registry import factories
from craftai_infer.routes.sam2_onnx import Sam2Onnx


def _files(encoder: Path, decoder: Path) -> RouteFiles:
    return RouteFiles({"encoder": encoder, "decoder": decoder}, None, cpu_threads=1)


def test_both_recipes_run_on_onnxruntime_with_the_same_route() -> None:
    found = factories()
    assert found[("sam2-hiera-tiny", "onnxruntime")].load() is Sam2Onnx  # type: ignore[attr-defined]
    assert found[("sam2.1-hiera-tiny", "onnxruntime")].load() is Sam2Onnx  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_fixture_loads_on_the_cpu_and_other_files_are_refused(
    sam21_files: Sam21Fixture, u2netp_file: Path, tmp_path: Path
) -> None:
    assert Sam2Onnx(_files(sam21_files.encoder, sam21_files.decoder), "cpu").device == "cpu"
    with pytest.raises(ModelRefusedError, match="the encoder file is not a SAM 2 samexporter encoder"):
        Sam2Onnx(_files(u2netp_file, sam21_files.decoder), "cpu")
    text = tmp_path / "encoder.onnx"
    text.write_text("not a graph")
    with pytest.raises(ModelRefusedError, match="onnxruntime cannot load them"):
        Sam2Onnx(_files(text, sam21_files.decoder), "cpu")
