"""Session lifecycle on real servers: eviction under a budget that holds one picture, expiry after
an idle time of about a second, the SDK sending the picture again when its session is gone, and
tenants whose pictures other apps' opens never evict.

Servers on the store set up by prepare (`sam_store`), each with one setting changed, so that an
eviction is never mistaken for an expiry (each encoder run takes seconds here).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from craftai import AiClient, CraftAiError, MaskOutput, SegmentSession
from craftai_dev import servers
from craftai_dev.segment import SetUpStore, mask_of
from craftai_wire import local_tls
from craftai_wire.keys import new_key
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc

pytestmark = pytest.mark.slow
EMBEDDING_BYTES = 4 * (32 * 256 * 256 + 64 * 128 * 128 + 256 * 64 * 64)  # SAM 2 tiny: 16 MiB per picture
BUDGET = EMBEDDING_BYTES + EMBEDDING_BYTES // 2  # room for one picture, not two
IDLE_SECONDS = 1.5
CLICK = [(200.0, 150.0, True)]
# A picture sent again is encoded again: its click's mask is the first one's, up to pixels whose
# logit lies within rounding of the threshold (the idle test's docstring says why that is allowed)
MOST_PIXELS_APART = 1e-4  # of the picture's pixels
LEAST_IOU = 0.999
MOST_PREDICTED_IOU_APART = 1e-4


def _serve(sam_store: SetUpStore, workdir: Path, env: dict[str, str]) -> Iterator[servers.Process]:
    with servers.running(sam_store.serve(workdir, env)) as process:
        yield process


@pytest.fixture(scope="module")
def small_budget(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    yield from _serve(sam_store, tmp_path_factory.mktemp("budget"), {"CRAFTAI_SESSION_BUDGET_BYTES": str(BUDGET)})


@pytest.fixture(scope="module")
def short_idle(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    env = {"CRAFTAI_SESSION_IDLE_SECONDS": str(IDLE_SECONDS)}
    yield from _serve(sam_store, tmp_path_factory.mktemp("idle"), env)


EDITOR_KEY = new_key()


@pytest.fixture(scope="module")
def tenants(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """A budget for two pictures; an editor with a key of its own, the rest under the local `*` key."""
    workdir = tmp_path_factory.mktemp("tenants")
    keys = servers.keys_beside_the_local_one(workdir, editor=EDITOR_KEY)
    env = {
        "CRAFTAI_SESSION_BUDGET_BYTES": str(2 * EMBEDDING_BYTES + EMBEDDING_BYTES // 2),
        "CRAFTAI_KEYS_FILE": str(keys),
    }
    yield from _serve(sam_store, workdir, env)


def _assert_the_same_mask(again: MaskOutput, before: MaskOutput) -> None:
    """`again`, answered after the SDK sent the picture again, is `before`'s mask: the decoded pixels
    agree but for MOST_PIXELS_APART of them and the masks' IoU is at least LEAST_IOU (another click's,
    or another picture's, mask is far from both). A mask not byte for byte the first is said in a
    warning, so that a run where an encoder run was not reproduced leaves its numbers."""
    ours, theirs = mask_of(again.png) > 0, mask_of(before.png) > 0
    assert ours.shape == theirs.shape
    apart = int((ours != theirs).sum())
    iou = float((ours & theirs).sum() / max(1, int((ours | theirs).sum())))
    said = (apart, iou, again.predicted_iou, before.predicted_iou)
    assert apart <= MOST_PIXELS_APART * ours.size and iou >= LEAST_IOU, said
    assert abs(again.predicted_iou - before.predicted_iou) <= MOST_PREDICTED_IOU_APART, said
    if again.png != before.png:
        warnings.warn(f"the mask after the picture was sent again is not byte for byte the first: {said}", stacklevel=2)


def _is_kept(address: str, session: SegmentSession, app: str = "tests", key: str | None = None) -> bool:
    """Ask the server directly (not through the SDK, which would reopen the session)."""
    request = infer_pb2.SegmentRequest(
        session_id=session.session_id,
        prompt=infer_pb2.Prompt(points=[infer_pb2.Point(x=10, y=10, label=infer_pb2.POINT_LABEL_FOREGROUND)]),
    )
    metadata = servers.app_metadata(app) if key is None else (("craftai-app-id", app), ("craftai-app-key", key))
    with loopback_channel(address) as channel:
        try:
            list(infer_pb2_grpc.InferServiceStub(channel).Segment(request, metadata=metadata))
        except grpc.RpcError as exc:
            error = CraftAiError.from_rpc(exc)
            assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"), error
            return False
    return True


def test_the_runtime_reports_the_session_settings(small_budget: servers.Process, short_idle: servers.Process) -> None:
    with AiClient(app_id="tests", target=small_budget.address) as ai:
        assert ai.runtime().limits.session_budget_bytes == BUDGET
    with AiClient(app_id="tests", target=short_idle.address) as ai:
        assert ai.runtime().limits.session_idle_seconds == IDLE_SECONDS


def test_a_budget_for_one_picture_evicts_the_older_and_the_sdk_sends_it_again(
    small_budget: servers.Process, photos: dict[str, Path]
) -> None:
    with AiClient(app_id="tests", target=small_budget.address) as ai:
        first = ai.open_session(photos["chelsea.png"])
        before = first.segment(points=CLICK)
        second = ai.open_session(photos["astronaut.png"])
        assert not _is_kept(small_budget.address, first)  # evicted: the budget holds one embedding
        assert _is_kept(small_budget.address, second)

        again = first.segment(points=CLICK)  # the SDK re-sends chelsea.png and asks again
        assert again.reopened and first.reopened == 1
        _assert_the_same_mask(again.best, before.best)
        assert again.session_id == first.session_id != before.session_id
        assert not _is_kept(small_budget.address, second)  # reopening evicted the other in turn
        first.close()
        second.close()  # already gone: closing says nothing


def test_an_idle_session_is_forgotten_and_the_sdk_sends_it_again(
    short_idle: servers.Process, photos: dict[str, Path]
) -> None:
    """The mask after the picture was sent again is compared by its pixels, not its bytes: CI once
    answered a PNG one byte apart. The server encodes on onnxruntime's CPU route (one model thread
    under two pytest workers); here its embeddings and masks were bitwise the same in every repeat
    tried (encodes in one process beside a loaded CPU, fresh servers, inputs at other alignments,
    denormals flushed or not), so that one difference is unexplained, and a pixel at the threshold
    is what a last-bit change in an encoder run would flip."""
    with AiClient(app_id="tests", target=short_idle.address) as ai, ai.open_session(photos["chelsea.png"]) as session:
        assert session.idle_seconds == IDLE_SECONDS
        before = session.segment(points=CLICK)
        assert not before.reopened
        time.sleep(IDLE_SECONDS * 2)
        assert not _is_kept(short_idle.address, session)

        again = session.segment(points=CLICK)
        assert again.reopened and session.reopened == 1
        _assert_the_same_mask(again.best, before.best)


def test_made_up_app_ids_evict_only_their_own_pictures(tenants: servers.Process, photos: dict[str, Path]) -> None:
    """Four made-up ids under the local key open a picture each on a budget for two: they are one
    tenant, so each open evicts that tenant's own oldest; the editor's picture stays."""
    editor = AiClient(
        "editor", target=tenants.address, app_key=EDITOR_KEY, root_certificates=local_tls.certificate_file()
    )
    made_up = [AiClient(f"made-up-{n}", target=tenants.address) for n in range(4)]
    try:
        kept = editor.open_session(photos["chelsea.png"])
        theirs = [ai.open_session(photos["astronaut.png"]) for ai in made_up]
        assert _is_kept(tenants.address, kept, "editor", EDITOR_KEY)
        assert [_is_kept(tenants.address, s, f"made-up-{n}") for n, s in enumerate(theirs)] == [False] * 3 + [True]
        assert not kept.segment(points=CLICK).reopened
    finally:
        for ai in (editor, *made_up):
            ai.close()
