"""A GPU failure that is not a cancel: the model is rebuilt on the CPU from the same files, the
request is answered there with a notice, and the model stays on the CPU (tried once).

No GPU here: CRAFTAI_FAULT_INJECTION=gpu-oom-once builds each route on the CPU, presents it as on
"cuda:0" and fails its first call as an out-of-memory GPU does (craftai_infer/faults.py), so the
real fallback path runs."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from craftai import AiClient
from craftai_dev import segment, servers

INJECT = {"CRAFTAI_FAULT_INJECTION": "gpu-oom-once"}


def test_matte_falls_back_to_the_cpu_once(tmp_path: Path, local_catalogue: Path, photos: dict[str, Path]) -> None:
    process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(local_catalogue), **INJECT})
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        list(ai.setup("image.matte", "u2netp"))
        first = ai.remove_background(photos["chelsea.png"], outputs="matte")
        assert first.device == "cpu" and first.width == 451
        (notice,) = first.notices
        assert "the GPU failed (OutOfMemoryError: CUDA out of memory" in notice and "keeps using" in notice
        second = ai.remove_background(photos["chelsea.png"], outputs="matte")
        assert second.device == "cpu" and second.notices == []
        assert second.matte_png == first.matte_png
        (loaded,) = ai.runtime().loaded
        assert loaded.device == "cpu"


def test_a_segment_session_falls_back_and_keeps_serving(tmp_path: Path, sam_store: segment.SetUpStore) -> None:
    process = sam_store.serve(tmp_path, INJECT)
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        picture = segment.png(Image.new("RGB", (64, 48), (200, 120, 40)))
        session = ai.open_session(picture)
        assert session.device == "cpu"
        assert any("the GPU failed" in n for n in session.notices)
        answer = session.segment([(20, 20, True)])
        assert answer.device == "cpu" and answer.notices == []
        assert ai.segment_once(picture, [(10, 10, True)]).notices == []
