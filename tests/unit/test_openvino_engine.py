"""The openvino engine of u2netp (issue 19): compiled in f32 with the chosen hint, bounded by
CRAFTAI_CPU_THREADS, safe to call from its concurrent runs, and plain about a missing package."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from PIL import Image

from craftai_common.errors import ServiceError
from craftai_dev.files import sample_photo, u2netp_onnx
from craftai_dev.masks import NEAR_MASK_MIN_IOU, NEAR_MATTE_MAX_DIFF, iou
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.registry import factories
from craftai_infer.routes.u2netp_onnx import U2netpOnnx
from craftai_infer.settings import InferSettings
from craftai_wire.vocabulary import Reason

# the engine's modules import the package itself: skipped, not an error, where it is not installed
pytest.importorskip("openvino", reason="the openvino engine's package (tools/bootstrap.sh --dev installs it)")
from craftai_infer.engines import openvino as engine
from craftai_infer.routes.u2netp_openvino import U2netpOpenvino


def _route(cpu_threads: int = 0) -> U2netpOpenvino:
    return U2netpOpenvino(RouteFiles({"network": u2netp_onnx()}, None, cpu_threads), "cpu")


def test_the_registry_builds_it_in_f32_with_the_chosen_hint_on_the_cpu() -> None:
    route = factories()[("u2netp", "openvino")](RouteFiles({"network": u2netp_onnx()}, None, 0), "cuda:0")
    assert isinstance(route, U2netpOpenvino)
    assert route.device == "cpu"  # named on a GPU machine, it still runs on the CPU
    model = route.model
    assert model.setting("INFERENCE_PRECISION_HINT") == "f32"  # the CPU plugin's bf16 default would move the matte
    assert model.setting("PERFORMANCE_HINT") == engine.PERFORMANCE_HINT == "LATENCY"
    assert route.capabilities.concurrent_runs == model.concurrent_runs == engine.REQUESTS
    assert model.input_names == ["input.1"] and len(model.output_names) == 7


@pytest.mark.parametrize(("value", "threads"), [("1", "1"), ("2", "2")])
def test_craftai_cpu_threads_bounds_its_threads(monkeypatch: pytest.MonkeyPatch, value: str, threads: str) -> None:
    monkeypatch.setenv("CRAFTAI_CPU_THREADS", value)
    assert _route(InferSettings().cpu_threads).model.setting("INFERENCE_NUM_THREADS") == threads


def test_concurrent_runs_answer_each_picture_its_own_matte() -> None:
    """Two threads at once (the route's concurrent runs) on different photos: each gets the matte it
    gets alone; a request shared between the threads would mix them up."""
    route = _route()
    pictures = [np.asarray(Image.open(sample_photo(name)).convert("RGB")) for name in ("chelsea.png", "coffee.png")]
    alone = [route.matte([p])[0] for p in pictures]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda i: route.matte([pictures[i % 2]])[0], range(6)))
    for i, matte in enumerate(together):
        np.testing.assert_array_equal(matte, alone[i % 2])
    assert not np.array_equal(alone[0][:100, :100], alone[1][:100, :100])


def test_its_matte_is_within_one_level_of_onnxruntimes() -> None:
    """In-process, on one photo: the bar of issue 19 (the parity suite compares with rembg itself).
    Not identical: 63 of the astronaut's 262,144 pixels differ by 1/255, two of them across the
    >0.5 threshold (IoU 0.999986)."""
    picture = np.asarray(Image.open(sample_photo("astronaut.png")).convert("RGB"))
    ours = _route().matte([picture])[0].astype(int)
    reference = U2netpOnnx(RouteFiles({"network": u2netp_onnx()}, None, 0), "cpu").matte([picture])[0].astype(int)
    assert np.abs(ours - reference).max() <= NEAR_MATTE_MAX_DIFF
    assert iou(ours > 127, reference > 127) >= NEAR_MASK_MIN_IOU


def test_a_service_without_the_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The route list answers for it as for every engine's package (routes/registry.py)."""
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` raises ImportError, as when absent
    for module in ("craftai_infer.engines.openvino", "craftai_infer.routes.u2netp_openvino"):
        monkeypatch.delitem(sys.modules, module)  # imported afresh, as in a service that never had it
    with pytest.raises(ServiceError) as caught:
        factories()[("u2netp", "openvino")](RouteFiles({"network": u2netp_onnx()}, None, 0), "cpu")
    error = caught.value
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and error.reason == Reason.ENGINE_NOT_INSTALLED
    assert (
        "pip install 'craftai-infer[openvino]'" in error.message and "another of the recipe's engines" in error.message
    )
