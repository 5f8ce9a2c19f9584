"""Every image.segment request's cost bounded before it is spent (docs/SECURITY.md, "Limits"), on a
real `craftai serve` with the SAM fixture on the CPU and a small memory budget: a Segment call
whose masks could never fit is refused at once, in words that say what would; segment everything
stops with LIMIT_REACHED as soon as its masks pass what one answer may carry (it used to run the
whole grid, then find its answer too large); each mask's low-res logits come only when asked."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, Prompt, Retries
from craftai_dev import servers
from craftai_dev.segment import SetUpStore

pytestmark = pytest.mark.slow
MiB = 1 << 20
BUDGET = 64 * MiB
MESSAGE = MiB  # the smallest message limit a server takes


@pytest.fixture(scope="module")
def server(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    env = {"CRAFTAI_DECODE_BUDGET_BYTES": str(BUDGET), "CRAFTAI_MAX_MESSAGE_BYTES": str(MESSAGE)}
    with servers.running(sam_store.serve(tmp_path_factory.mktemp("costs"), env)) as process:
        yield process


@pytest.fixture(scope="module")
def ai(server: servers.Process) -> Iterator[AiClient]:
    with AiClient("costs", target=server.address, retries=Retries(attempts=0)) as client:
        yield client


def _png(width: int, height: int) -> bytes:
    """A large picture in a small file (the message limit here is 1 MiB): a square on a plain ground."""
    picture = Image.new("RGB", (width, height), (40, 120, 200))
    picture.paste((230, 200, 40), (width // 4, height // 4, 3 * width // 4, 3 * height // 4))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def test_a_segment_call_whose_masks_could_never_fit_is_refused_at_once(ai: AiClient) -> None:
    """64 objects x 3 masks of a 2000x1500 picture are ~3.4 GB of masks at the picture's size:
    refused before the decoder runs, naming how many masks a call would fit; one click is answered."""
    with ai.open_session(_png(2000, 1500)) as picture:
        boxes = [Prompt(box=(10.0 + k, 10.0, 500.0 + k, 400.0), all_masks=True) for k in range(64)]
        with pytest.raises(CraftAiError) as refused:
            picture.segment(prompts=boxes)
        one = picture.segment(points=[(1000, 700, True)])
    error = refused.value
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVER_BUDGET")
    assert "192 masks of a 2000x1500 picture needs ~" in error.message
    assert "masks a call" in error.message
    assert (one.width, one.height) == (2000, 1500) and one.best.low_res_logits is None


def test_segment_everything_stops_once_its_masks_pass_what_an_answer_carries(
    ai: AiClient, photos: dict[str, Path]
) -> None:
    """Every point's masks kept (thresholds 0) on the fixture's noisy masks: the grid is stopped
    with LIMIT_REACHED before its end, saying how far it got."""
    progress: list[int] = []
    with ai.open_session(photos["astronaut.png"]) as picture:
        with pytest.raises(CraftAiError) as stopped:
            picture.segment_everything(
                points_per_side=16,
                points_per_batch=16,
                pred_iou_thresh=0.0,
                stability_score_thresh=0.0,
                on_progress=lambda p: progress.append(int(p.done)),
            )
        after = picture.segment(points=[(200, 150, True)])  # the session and the server go on
    error = stopped.value
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_REACHED")
    assert "segment everything stopped after" in error.message and "of 256 points" in error.message
    assert int(error.metadata["points_done"]) < 256
    assert all(done < 256 for done in progress)
    assert not after.best.empty or after.best.predicted_iou >= 0
