"""Loaded models share one budget (CRAFTAI_MODELS_BUDGET_BYTES) on real servers: an idle model is
unloaded for another and loads again when asked; a model in use is never unloaded (the load waits,
then is refused in plain words); one whose files alone exceed the budget is refused at once; a
SAM model whose sessions are kept stays until they are closed.

Each budget holds one model and not two (every loaded route counts at least its files' bytes), so
what stays loaded does not depend on how much memory a load happened to add.
"""

from __future__ import annotations

import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, CraftAiError
from craftai_dev import catalogues, servers, stand_ins
from craftai_dev.segment import DEFAULT, RECIPE, SetUpStore

pytestmark = pytest.mark.slow
WAIT_SECONDS = 0.3  # CRAFTAI_DECODE_WAIT_SECONDS: how long a load waits for a model in use to go idle


def _loaded(ai: AiClient) -> list[str]:
    return sorted(r.route.recipe for r in ai.runtime().loaded)


def _refused(error: CraftAiError, reason: str) -> None:
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, reason), error
    assert "CRAFTAI_MODELS_BUDGET_BYTES" in error.message, error.message


@pytest.fixture(scope="module")
def one_model(u2netp_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """u2netp's real file pinned as u2netp and as u2net (two routes, the same bytes), and a file twice
    as large pinned as silueta; room for one u2netp; every model call slowed (a request surely in
    progress while another asks for its room)."""
    work = tmp_path_factory.mktemp("models-budget")
    twice = work / "twice.onnx"
    twice.write_bytes(u2netp_file.read_bytes() * 2)
    env = {
        "CRAFTAI_MODELS_BUDGET_BYTES": str(u2netp_file.stat().st_size + (1 << 20)),
        "CRAFTAI_DECODE_WAIT_SECONDS": str(WAIT_SECONDS),
        "CRAFTAI_FAULT_INJECTION": "slow-model",
    }
    files = {"u2netp": u2netp_file, "u2net": u2netp_file, "silueta": twice}
    with stand_ins.serving(files, work / "served", ["u2netp", "u2net"], env) as process:
        yield process


def test_an_idle_model_is_unloaded_for_another_and_loads_again(
    one_model: servers.Process, photos: dict[str, Path], u2netp_file: Path
) -> None:
    picture = photos["chelsea.png"].read_bytes()
    with AiClient(app_id="tests", target=one_model.address) as ai:
        first = ai.remove_background(picture, outputs="matte", recipe="u2netp")
        assert _loaded(ai) == ["u2netp"]
        (model,) = ai.runtime().loaded
        assert model.resident_bytes >= u2netp_file.stat().st_size
        assert ai.runtime().limits.models_budget_bytes > 0
        other = ai.remove_background(picture, outputs="matte", recipe="u2net")
        assert _loaded(ai) == ["u2net"]
        again = ai.remove_background(picture, outputs="matte", recipe="u2netp")
        assert _loaded(ai) == ["u2netp"]
    assert first.matte_png == other.matte_png == again.matte_png  # the same file: the same matte
    with AiClient(app_id="tests", target=one_model.address) as ai:
        measured = {m.route.recipe: m for m in ai.runtime().measured}
    assert measured["u2netp"].pictures == 2 and measured["u2net"].pictures == 1  # kept across unloads
    assert measured["u2netp"].network_ms > 0 and measured["u2netp"].device == "cpu"
    assert "unloaded u2netp/onnxruntime" in one_model.logs()


def test_a_model_in_use_is_not_unloaded(one_model: servers.Process, photos: dict[str, Path]) -> None:
    picture = photos["chelsea.png"].read_bytes()
    with AiClient(app_id="tests", target=one_model.address) as ai:
        ai.remove_background(picture, outputs="matte", recipe="u2netp")  # loaded, idle
        before = {r.route.recipe: r.requests for r in ai.runtime().loaded}["u2netp"]
        answers: list[object] = []
        running = threading.Thread(
            target=lambda: answers.append(ai.remove_background(picture, outputs="matte", recipe="u2netp"))
        )
        running.start()
        try:
            while {r.route.recipe: r.requests for r in ai.runtime().loaded}["u2netp"] == before:
                pass  # until its request reached the model (which then takes seconds: slow-model)
            with pytest.raises(CraftAiError) as refused:
                ai.remove_background(picture, outputs="matte", recipe="u2net")
        finally:
            running.join()
        _refused(refused.value, "MEMORY_BUDGET")
        assert "u2netp" in refused.value.message and refused.value.retry_after
        assert answers and _loaded(ai) == ["u2netp"]  # the request in progress was answered
        ai.remove_background(picture, outputs="matte", recipe="u2net")  # idle now: room made
        assert _loaded(ai) == ["u2net"]


def test_a_model_larger_than_the_budget_is_refused_at_once(one_model: servers.Process, photos: dict[str, Path]) -> None:
    with AiClient(app_id="tests", target=one_model.address) as ai:
        loaded = _loaded(ai)
        with pytest.raises(CraftAiError) as refused:
            ai.remove_background(photos["chelsea.png"], outputs="matte", recipe="silueta")
        assert _loaded(ai) == loaded  # nothing was unloaded for it
    _refused(refused.value, "OVER_BUDGET")
    assert "silueta" in refused.value.message


@pytest.fixture(scope="module")
def one_sam(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """Both SAM recipes set up (the same fixture's files), room for one of them."""
    pinned = catalogues.recipe(tomllib.loads(sam_store.recipes.read_text()), DEFAULT)["files"]
    files = sum(f["size"] for f in pinned if "onnxruntime" in f.get("engines", ["onnxruntime"]))
    env = {"CRAFTAI_MODELS_BUDGET_BYTES": str(files + (1 << 20)), "CRAFTAI_DECODE_WAIT_SECONDS": str(WAIT_SECONDS)}
    with servers.running(sam_store.serve(tmp_path_factory.mktemp("one-sam"), env)) as process:
        yield process


def test_a_model_whose_sessions_are_kept_stays_loaded(one_sam: servers.Process, photos: dict[str, Path]) -> None:
    with AiClient(app_id="tests", target=one_sam.address) as ai:
        session = ai.open_session(photos["chelsea.png"], DEFAULT, "onnxruntime")
        assert _loaded(ai) == [DEFAULT]
        with pytest.raises(CraftAiError) as refused:
            ai.segment_once(photos["astronaut.png"], [(200.0, 150.0)], recipe=RECIPE, engine="onnxruntime")
        _refused(refused.value, "MEMORY_BUDGET")
        assert session.segment([(200.0, 150.0, True)]).masks  # its model is still there
        session.close()
        ai.segment_once(photos["astronaut.png"], [(200.0, 150.0)], recipe=RECIPE, engine="onnxruntime")
        assert _loaded(ai) == [RECIPE]
