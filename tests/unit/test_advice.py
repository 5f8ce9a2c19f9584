"""Engine advice: which recipe and route suit a machine."""

from __future__ import annotations

import grpc
import pytest

from craftai_catalogue import advice, recipes
from craftai_common.errors import ServiceError
from craftai_wire.vocabulary import Reason

DATA = recipes.load()
# The real data with SAM 2.1 tiny's bytes unconfirmed again (as before issue 15 confirmed them):
# what an unavailable recipe is answered.
UNCONFIRMED = DATA.model_copy(
    update={
        "recipes": [
            r.model_copy(
                update={"available": False, "unavailable_reason": "its archive has no confirmed size or SHA-256 yet"}
            )
            if r.name == "sam2.1-hiera-tiny"
            else r
            for r in DATA.recipes
        ]
    }
)


@pytest.mark.parametrize(
    ("gpu", "recipe", "engine"), [(False, "u2netp", "onnxruntime"), (True, "inspyrenet-swinb", "torch")]
)
def test_default_matte_route(gpu: bool, recipe: str, engine: str) -> None:
    chosen = advice.resolve(DATA, "image.matte", gpu=gpu)
    assert (chosen.recipe.name, chosen.route.engine) == (recipe, engine)
    assert ("with a GPU" if gpu else "without a GPU") in chosen.reason


@pytest.mark.parametrize(("gpu", "engine"), [(False, "onnxruntime"), (True, "torch")])
def test_default_segment_route_is_sam21_tiny(gpu: bool, engine: str) -> None:
    chosen = advice.resolve(DATA, "image.segment", gpu=gpu)
    assert (chosen.recipe.name, chosen.route.engine) == ("sam2.1-hiera-tiny", engine)


def test_asked_recipe_and_engine_win() -> None:
    chosen = advice.resolve(DATA, "image.matte", "inspyrenet-swinb", "torch", gpu=False)
    assert (chosen.recipe.name, chosen.route.engine) == ("inspyrenet-swinb", "torch")


def test_a_route_slow_on_the_cpu_is_said_so() -> None:
    chosen = advice.resolve(DATA, "image.matte", "inspyrenet-swinb", gpu=False)
    assert "slow" in chosen.reason
    chosen = advice.resolve(DATA, "image.matte", "inspyrenet-swinb", gpu=True)
    assert "preferred when a GPU answers" in chosen.reason


@pytest.mark.parametrize("gpu", [False, True])
def test_u2netp_offers_openvino_but_only_when_named(gpu: bool) -> None:
    """Issue 19: the openvino engine is opt-in (its matte is within 1/255 of rembg's, not identical):
    no advice on any machine, for any recipe, ever picks it; named, it is answered."""
    u2netp = DATA.recipe("image.matte", "u2netp")
    assert u2netp is not None and [r.engine for r in u2netp.routes] == ["onnxruntime", "torch", "openvino"]
    route = u2netp.route("openvino")
    assert route is not None and not (route.prefer_on_gpu or route.quick_on_cpu or route.needs_preparation)
    assert [f.name for f in u2netp.files_of("openvino")] == ["u2netp.onnx"]  # the published file, as downloaded
    assert advice.resolve(DATA, "image.matte", "u2netp", gpu=gpu).route.engine == "onnxruntime"
    for feature in DATA.features:
        assert advice.resolve(DATA, feature.name, gpu=gpu).route.engine != "openvino"
        for recipe in DATA.recipes_of(feature.name):
            if recipe.available:
                assert advice.resolve(DATA, feature.name, recipe.name, gpu=gpu).route.engine != "openvino"
    chosen = advice.resolve(DATA, "image.matte", "u2netp", "openvino", gpu=gpu)
    assert chosen.route.engine == "openvino" and "engine openvino as asked" in chosen.reason


def test_only_u2netp_offers_openvino_and_the_cli_knows_every_engine() -> None:
    from craftai.cli.parser import ENGINES

    assert ENGINES == recipes.ENGINES == ("onnxruntime", "torch", "openvino")
    offering = [r.name for r in DATA.recipes if r.route("openvino") is not None]
    assert offering == ["u2netp"]
    with pytest.raises(ServiceError) as caught:
        advice.resolve(DATA, "image.matte", "birefnet-lite", "openvino", gpu=False)
    assert caught.value.reason == Reason.UNKNOWN_ENGINE and "its engines: torch, onnxruntime" in caught.value.message


@pytest.mark.parametrize("gpu", [False, True])
def test_birefnet_lite_runs_on_torch_on_both_machines(gpu: bool) -> None:
    """The measurement of docs/PERFORMANCE.md: on the CPU the torch route holds half the memory of
    onnxruntime's at 1024² for about the same work; on the GPU it runs with CUDA graphs."""
    chosen = advice.resolve(DATA, "image.matte", "birefnet-lite", gpu=gpu)
    assert chosen.route.engine == "torch"
    assert ("preferred when a GPU answers" if gpu else "expect it to be slow") in chosen.reason


@pytest.mark.parametrize(
    ("feature", "recipe", "engine", "code", "reason", "words"),
    [
        ("image.blur", "", "", grpc.StatusCode.NOT_FOUND, Reason.UNKNOWN_FEATURE, "known features: image.segment"),
        ("image.matte", "birefnet", "", grpc.StatusCode.NOT_FOUND, Reason.UNKNOWN_RECIPE, "its recipes: "),
        ("image.matte", "u2netp", "tensorrt", grpc.StatusCode.NOT_FOUND, Reason.UNKNOWN_ENGINE, "its engines: "),
        (
            "image.segment",
            "sam2.1-hiera-tiny",
            "",
            grpc.StatusCode.FAILED_PRECONDITION,
            Reason.RECIPE_UNAVAILABLE,
            "no confirmed size or SHA-256",
        ),
    ],
)
def test_plain_refusals(
    feature: str, recipe: str, engine: str, code: grpc.StatusCode, reason: Reason, words: str
) -> None:
    with pytest.raises(ServiceError) as caught:
        advice.resolve(UNCONFIRMED, feature, recipe, engine, gpu=False)
    assert (caught.value.code, caught.value.reason) == (code, reason)
    assert words in caught.value.message
