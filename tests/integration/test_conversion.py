"""The torch route of u2netp: prepared once (self-verified), then only checked; the revision rule."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, RouteState, RouteStatus, SetupOutput
from craftai_catalogue import recipes
from craftai_common.store import FilePin, prepared_key
from craftai_dev import catalogues, servers
from craftai_dev.files import U2NETP_SHA256, U2NETP_SIZE, sha256_of
from craftai_prepare.conversion import converters
from craftai_wire.v1 import common_pb2

PINS = [FilePin("u2netp", "u2netp.onnx", U2NETP_SIZE, U2NETP_SHA256)]


def _events(ai: AiClient, engine: str = "torch") -> list[object]:
    return list(ai.setup("image.matte", "u2netp", engine))


def _state(ai: AiClient, engine: str) -> RouteStatus:
    return next(s for s in ai.status("image.matte", "u2netp") if s.route.engine == engine)


@pytest.fixture(scope="module")
def torch_server(local_catalogue: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    workdir = tmp_path_factory.mktemp("torch-server")
    process = servers.embedded(workdir / "store", workdir, {"CRAFTAI_RECIPES": str(local_catalogue)})
    with servers.running(process):
        yield process


def test_revision_in_code_equals_the_catalogue_and_the_key_follows_it() -> None:
    data = recipes.load()
    known = converters()
    for recipe in data.recipes:
        for route in recipe.routes:
            if route.needs_preparation:
                assert route.revision in known, (recipe.name, route.revision, sorted(known))
    from craftai_prepare.converters import u2netp

    assert "u2netp-torch.1" == u2netp.REVISION == f"u2netp-torch.{u2netp.CONVERTER_VERSION}"
    key = prepared_key(u2netp.REVISION, PINS)
    assert key.startswith("u2netp-torch.1-")
    assert prepared_key("u2netp-torch.2", PINS) != key
    assert prepared_key(u2netp.REVISION, [FilePin("u2netp", "u2netp.onnx", U2NETP_SIZE, "0" * 64)]) != key


def test_prepared_once_then_only_checked(torch_server: servers.Process, photos: dict[str, Path]) -> None:
    store = Path(torch_server.log).parent / "store"
    with AiClient(app_id="tests", target=torch_server.address) as ai:
        assert _state(ai, "torch").state == RouteState.MISSING
        _events(ai, "onnxruntime")
        downloaded = _state(ai, "torch")
        assert downloaded.state == RouteState.DOWNLOADED and downloaded.needs_preparation
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(photos["chelsea.png"], outputs="matte", engine="torch")
        assert caught.value.reason == "ROUTE_NOT_SET_UP"
        assert "craftai setup image.matte --recipe u2netp --engine torch" in caught.value.message

        first = _events(ai)
        result = first[-1]
        assert isinstance(result, SetupOutput) and result.prepared_now and not result.already_done
        key = prepared_key("u2netp-torch.1", PINS)
        assert result.revision == key == _state(ai, "torch").revision
        steps = [e for e in first if isinstance(e, common_pb2.Progress) and e.stage == "convert"]
        assert steps[-1].done == steps[-1].total and len(steps) >= 4
        manifest = json.loads((store / "prepared" / "u2netp" / key / "manifest.json").read_text())
        assert manifest["sources"] == {"u2netp.onnx": U2NETP_SHA256}
        assert manifest["verification"]["max_abs_fused"] <= 1e-4
        weights = store / "prepared" / "u2netp" / key / "u2netp.safetensors"
        assert manifest["outputs"]["u2netp.safetensors"]["sha256"] == sha256_of(weights)
        assert _state(ai, "torch").state == RouteState.PREPARED

        second = _events(ai)
        again = second[-1]
        assert isinstance(again, SetupOutput) and again.already_done and not again.prepared_now
        assert not [e for e in second if isinstance(e, common_pb2.Progress) and e.stage == "convert"]


def test_torch_mattes_agree_with_onnxruntime(torch_server: servers.Process, photos: dict[str, Path]) -> None:
    with AiClient(app_id="tests", target=torch_server.address) as ai:
        _events(ai)
        for name, path in photos.items():
            ours = ai.remove_background(path, outputs="matte", engine="torch")
            theirs = ai.remove_background(path, outputs="matte", engine="onnxruntime")
            assert (ours.engine, theirs.engine) == ("torch", "onnxruntime")
            a = np.asarray(Image.open(io.BytesIO(ours.matte_png))) > 127
            b = np.asarray(Image.open(io.BytesIO(theirs.matte_png))) > 127
            iou = np.logical_and(a, b).sum() / np.logical_or(a, b).sum()
            assert iou >= 0.999, (name, iou)


def test_a_prepared_folder_of_another_revision_is_not_reused(
    tmp_path: Path, local_catalogue: Path, photos: dict[str, Path]
) -> None:
    process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(local_catalogue)})
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        _events(ai)
        prepared = tmp_path / "store" / "prepared" / "u2netp"
        (current,) = prepared.iterdir()
        other = prepared / "u2netp-torch.0-000000000000"
        current.rename(other)  # an older revision's folder: never to be used for this one
        assert _state(ai, "torch").state == RouteState.DOWNLOADED
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(photos["chelsea.png"], outputs="matte", engine="torch")
        assert caught.value.reason == "ROUTE_NOT_SET_UP" and "not prepared" in caught.value.message
        result = _events(ai)[-1]
        assert isinstance(result, SetupOutput) and result.prepared_now
        assert sorted(p.name for p in prepared.iterdir()) == sorted([current.name, other.name])

        # Same name, but its manifest says another key: refused by infer, then prepared again.
        manifest = current / "manifest.json"
        manifest.write_text(manifest.read_text().replace(current.name, other.name))
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(photos["chelsea.png"], outputs="matte", engine="torch")
        assert f"it was prepared as {other.name}" in caught.value.message
        events = _events(ai)
        assert any(isinstance(e, common_pb2.Notice) and e.code == "PREPARED_REFUSED" for e in events)
        assert ai.remove_background(photos["chelsea.png"], outputs="matte", engine="torch").engine == "torch"


def test_infer_refuses_a_prepared_folder_whose_outputs_do_not_match(
    tmp_path: Path, local_catalogue: Path, photos: dict[str, Path]
) -> None:
    process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(local_catalogue)})
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        _events(ai)
        (folder,) = (tmp_path / "store" / "prepared" / "u2netp").iterdir()
        weights = folder / "u2netp.safetensors"
        data = bytearray(weights.read_bytes())
        data[-100] ^= 0xFF
        weights.write_bytes(bytes(data))
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(photos["chelsea.png"], outputs="matte", engine="torch")
        error = caught.value
        assert error.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "u2netp.safetensors has SHA-256" in error.message and "where its manifest says" in error.message
        result = _events(ai)[-1]
        assert isinstance(result, SetupOutput) and result.prepared_now


def test_a_conversion_that_fails_its_check_publishes_nothing(tmp_path: Path, u2netp_file: Path) -> None:
    """A graph the converter cannot reproduce (one Resize with another coordinate mode)."""
    model = onnx.load(str(u2netp_file))
    resize = next(n for n in model.graph.node if n.op_type == "Resize")
    for attribute in resize.attribute:
        if attribute.name == "coordinate_transformation_mode":
            attribute.s = b"align_corners"
    served = tmp_path / "files"
    served.mkdir()
    onnx.save(model, str(served / "u2netp.onnx"))
    data = catalogues.real_data()
    pinned = catalogues.recipe(data, "u2netp")["files"][0]
    pinned.update(size=(served / "u2netp.onnx").stat().st_size, sha256=sha256_of(served / "u2netp.onnx"))
    with servers.FileServer(served) as files:
        pinned["sources"] = [{"url": f"{files.url}/u2netp.onnx"}]
        path = tmp_path / "recipes.toml"
        catalogues.write(path, data)
        process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(path)})
        with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
            with pytest.raises(CraftAiError) as caught:
                _events(ai)
            error = caught.value
            assert error.reason == "PREPARATION_FAILED" and "published nothing" in error.message
            assert "coordinate_transformation_mode" in error.message or "Resize" in error.message
            assert not any((tmp_path / "store" / "prepared").rglob("*"))
            assert not [p for p in (tmp_path / "store" / "tmp").iterdir() if p.name.startswith("prepare-")]
            assert _state(ai, "torch").state == RouteState.DOWNLOADED
    shutil.rmtree(tmp_path / "store")
