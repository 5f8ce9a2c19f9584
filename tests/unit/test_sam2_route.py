"""The SAM 2 / 2.1 tiny onnxruntime route: both recipes, the CPU here, from its prepared folder (the
decoder that answers Meta's single mask too), other files refused in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from craftai_dev.sam_fixture import Sam21Fixture
from craftai_infer.routes import ModelRefusedError, RouteFiles
from craftai_infer.routes.registry import factories
from craftai_infer.routes.sam2_onnx import Sam2Onnx
from craftai_models.sam2.contract import PREPARED_DECODER, PREPARED_ENCODER
from craftai_prepare.converters import Inputs
from craftai_prepare.converters.sam21_decoder import prepare


def _folder(root: Path, encoder: Path, decoder: Path) -> RouteFiles:
    """A prepared folder holding these two graphs (as the loader hands a route its folder)."""
    root.mkdir()
    (root / PREPARED_ENCODER).symlink_to(encoder)
    (root / PREPARED_DECODER).symlink_to(decoder)
    return RouteFiles({}, root, cpu_threads=1)


def test_both_recipes_run_on_onnxruntime_with_the_same_route() -> None:
    found = factories()
    assert found[("sam2-hiera-tiny", "onnxruntime")].load() is Sam2Onnx  # type: ignore[attr-defined]
    assert found[("sam2.1-hiera-tiny", "onnxruntime")].load() is Sam2Onnx  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_fixture_loads_on_the_cpu_and_other_files_are_refused(
    sam21_files: Sam21Fixture, u2netp_file: Path, tmp_path: Path
) -> None:
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    prepare(Inputs({"encoder": sam21_files.encoder, "decoder": sam21_files.decoder}), prepared, lambda _: None)
    route = Sam2Onnx(RouteFiles({}, prepared, cpu_threads=1), "cpu")
    assert route.device == "cpu" and route.capabilities.single_mask_like_meta
    # The published decoder as it is: the three multimask outputs only, and the route says so.
    published = Sam2Onnx(_folder(tmp_path / "published", sam21_files.encoder, sam21_files.decoder), "cpu")
    assert not published.capabilities.single_mask_like_meta
    with pytest.raises(ModelRefusedError, match="the encoder file is not a SAM 2 samexporter encoder"):
        Sam2Onnx(_folder(tmp_path / "u2netp", u2netp_file, sam21_files.decoder), "cpu")
    text = tmp_path / "text.onnx"
    text.write_text("not a graph")
    with pytest.raises(ModelRefusedError, match="onnxruntime cannot load them"):
        Sam2Onnx(_folder(tmp_path / "text", text, sam21_files.decoder), "cpu")
