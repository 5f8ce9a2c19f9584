"""AiClient and AsyncAiClient through the same cases on real services: methods, options, typed
errors, keys, retries after a restart, sessions opened again when the server forgot them.

Each case runs once per client (`kind`); the asyncio client is driven on an event loop thread of
its own (craftai_dev.clients), so the assertions are the same lines for both.
"""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from PIL import Image

from craftai import CraftAiError, Retries, SetupOutput
from craftai_dev import servers
from craftai_dev.clients import KINDS, Kind, LoopThread, both
from craftai_dev.segment import SetUpStore, mask_of
from craftai_wire import local_tls
from craftai_wire.local_tls import loopback_channel
from craftai_wire.v1 import common_pb2, infer_pb2, infer_pb2_grpc


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module", params=KINDS)
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def matte_ai(kind: Kind, loop: LoopThread, matte_server: servers.Process) -> Iterator[Any]:
    with both(kind, loop, target=matte_server.address) as ai:
        yield ai


def _raw_matte(address: str, picture: bytes) -> infer_pb2.MatteResult:
    """The service's own answer, through the generated stub (no SDK)."""
    request = infer_pb2.MatteRequest(
        route=common_pb2.RouteRef(feature="image.matte", recipe="u2netp"),
        picture=common_pb2.Picture(data=picture),
        outputs=[
            infer_pb2.MatteOutputSpec(kind=infer_pb2.MATTE_OUTPUT_KIND_MATTE, format=infer_pb2.MATTE_FORMAT_PNG),
            infer_pb2.MatteOutputSpec(kind=infer_pb2.MATTE_OUTPUT_KIND_CUTOUT, format=infer_pb2.MATTE_FORMAT_PNG),
        ],
    )
    with loopback_channel(address) as channel:  # the local server speaks TLS, its certificate pinned
        events = list(infer_pb2_grpc.InferServiceStub(channel).Matte(request, metadata=servers.app_metadata()))
    return events[-1].result


def test_catalogue_and_runtime(matte_ai: Any) -> None:
    features = matte_ai.features()
    assert {f.name for f in features} >= {"image.matte", "image.segment"}
    portrait = next(r for f in features for r in f.recipes if r.name == "birefnet-portrait")
    assert {r.engine: r.download_bytes for r in portrait.routes} == {"onnxruntime": 972_666_916, "torch": 884_878_856}
    states = matte_ai.status("image.matte")
    assert any(r.route.recipe == "u2netp" for r in states)
    assert matte_ai.runtime().device == "cpu"
    resolved = matte_ai.resolve("image.matte", "u2netp")
    assert resolved.route.recipe == "u2netp" and resolved.reason
    assert resolved.chosen.download_bytes == sum(f.size for f in resolved.recipe.files) > 0


def test_setup_streams_progress_then_its_result(matte_ai: Any) -> None:
    events = list(matte_ai.setup("image.matte", "u2netp"))
    assert isinstance(events[-1], SetupOutput) and events[-1].already_done
    assert all(isinstance(e, common_pb2.Progress | common_pb2.Notice) for e in events[:-1])


def test_remove_background_answers_the_services_own_bytes(
    matte_ai: Any, matte_server: servers.Process, photos: dict[str, Path]
) -> None:
    stages: list[str] = []
    result = matte_ai.remove_background(
        photos["chelsea.png"], outputs="matte,cutout", recipe="u2netp", on_progress=lambda p: stages.append(p.stage)
    )
    raw = _raw_matte(matte_server.address, photos["chelsea.png"].read_bytes())
    assert result.matte_png == raw.matte.data and result.cutout_png == raw.cutout.data
    assert (result.width, result.height, result.recipe, result.device) == (raw.width, raw.height, "u2netp", "cpu")
    assert {"decode", "model", "encode"} <= set(stages) and result.request_id
    assert Image.open(io.BytesIO(result.cutout_png)).mode == "RGBA"


def test_the_blocking_client_reads_a_stream_on_the_callers_own_thread(
    matte_server: servers.Process, photos: dict[str, Path]
) -> None:
    """No thread is started to read a server stream: gRPC's default reader would hand each message
    over from the channel's polling thread (a thread switch a message, most of a click's cost)."""
    from craftai import AiClient

    with AiClient("tests", target=matte_server.address) as ai:
        ai.remove_background(photos["chelsea.png"], recipe="u2netp")  # the channel made and reached
        before = {t.ident for t in threading.enumerate()}
        started: list[set[int | None]] = []  # threads alive while each event is read, not there before
        ai.remove_background(
            photos["chelsea.png"],
            recipe="u2netp",
            on_progress=lambda _p: started.append({t.ident for t in threading.enumerate()} - before),
        )
    assert started and not any(started), started


def test_an_array_or_a_pillow_image_answers_what_its_file_answers(
    matte_ai: Any, matte_server: servers.Process, photos: dict[str, Path]
) -> None:
    """Both clients send pixels as the server reads them (craftai.pictures): the same matte, byte for
    byte, as the file's; a background picture given as an array too."""
    image = Image.open(photos["chelsea.png"]).convert("RGB")
    raw = _raw_matte(matte_server.address, photos["chelsea.png"].read_bytes())
    for picture in (np.asarray(image), image):
        result = matte_ai.remove_background(picture, outputs="matte", recipe="u2netp")
        assert result.matte_png == raw.matte.data, type(picture)
    behind = np.zeros((30, 40, 3), np.uint8)
    behind[:, :, 2] = 255
    blue = matte_ai.remove_background(image, recipe="u2netp", outputs="composite", bg_image=behind)
    assert blue.composite is not None and blue.composite.data.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("arguments", "code", "reason"),
    [
        ({"picture": b"GIF89a not a picture"}, grpc.StatusCode.INVALID_ARGUMENT, "BAD_PICTURE"),
        ({"picture": b""}, grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_PICTURE"),
        ({"recipe": "no-such-recipe"}, grpc.StatusCode.NOT_FOUND, "UNKNOWN_RECIPE"),
    ],
)
def test_errors_are_typed(
    matte_ai: Any, photos: dict[str, Path], arguments: dict[str, Any], code: grpc.StatusCode, reason: str
) -> None:
    arguments = {"picture": photos["coffee.png"], **arguments}
    with pytest.raises(CraftAiError) as raised:
        matte_ai.remove_background(arguments.pop("picture"), **arguments)
    assert (raised.value.code, raised.value.reason) == (code, reason) and raised.value.message


def test_a_route_not_set_up_says_so(matte_ai: Any, photos: dict[str, Path]) -> None:
    with pytest.raises(CraftAiError) as raised:
        matte_ai.segment_once(photos["coffee.png"], points=[(10, 10)])
    assert raised.value.reason == "ROUTE_NOT_SET_UP" and "set up image.segment" in raised.value.message


def test_keys_a_wrong_one_and_none(kind: Kind, loop: LoopThread, matte_server: servers.Process) -> None:
    # a key of one's own goes over TLS of one's own: here the local server's certificate as the root
    root = local_tls.certificate_file()
    with both(kind, loop, target=matte_server.address, app_key="craftai_not-a-key", root_certificates=root) as ai:
        with pytest.raises(CraftAiError) as raised:
            ai.runtime()
        assert raised.value.reason == "BAD_APP_KEY"
        anonymous = ai.for_app("tests", None)  # no key at all: not even the local one
        with pytest.raises(CraftAiError) as raised:
            anonymous.runtime()
        assert raised.value.reason == "MISSING_APP_KEY"
        keyed = ai.for_app("another-app", servers.ensure_local_key())  # the local key is the wildcard's
        assert keyed.runtime().device == "cpu"


def test_the_asyncio_client_looks_a_name_up_off_its_event_loop(
    loop: LoopThread, matte_server: servers.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target by name is looked up (whether it names several replicas, to spread calls over
    them) in a worker thread: a DNS answer can take seconds, and the event loop is the app's."""
    lookups: list[str] = []
    real = socket.getaddrinfo

    def watched(*args: Any, **kwargs: Any) -> Any:
        lookups.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", watched)
    port = matte_server.address.rsplit(":", 1)[1]
    with both("asyncio", loop, target=f"localhost:{port}") as ai:
        assert ai.runtime().device == "cpu"
    assert lookups, "the name was never looked up"
    assert "asyncio-client" not in lookups, lookups


def test_a_server_never_reached_is_not_waited_for(kind: Kind, loop: LoopThread) -> None:
    with both(kind, loop, target=f"127.0.0.1:{servers.free_port()}") as ai:
        started = time.monotonic()
        with pytest.raises(CraftAiError) as raised:
            ai.runtime()
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 10


def test_a_call_after_a_restart_is_tried_again(
    kind: Kind, loop: LoopThread, tmp_path: Path, local_catalogue: Path
) -> None:
    process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(local_catalogue)})
    try:
        with both(kind, loop, target=process.address, retries=Retries(wait_seconds=60)) as ai:
            assert ai.runtime().device == "cpu"  # reached once
            assert process.stop() == 0
            restarted: list[servers.Process] = []
            later = threading.Timer(1.0, lambda: restarted.append(process.restart()))
            later.start()
            try:
                assert ai.runtime().device == "cpu"  # UNAVAILABLE, waited for, tried again
            finally:
                later.join()
            process = restarted[0]
    finally:
        process.stop()


# -- image.segment -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sam_server(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    with servers.running(sam_store.serve(tmp_path_factory.mktemp("clients-sam"))) as process:
        yield process


@pytest.fixture(scope="module")
def sam_ai(kind: Kind, loop: LoopThread, sam_server: servers.Process) -> Iterator[Any]:
    with both(kind, loop, target=sam_server.address) as ai:
        yield ai


def _forget(address: str, session_id: str) -> None:
    """Close the session on the server behind the SDK's back (as an eviction would)."""
    with loopback_channel(address) as channel:  # the local server speaks TLS, its certificate pinned
        infer_pb2_grpc.InferServiceStub(channel).CloseSession(
            infer_pb2.CloseSessionRequest(session_id=session_id), metadata=servers.app_metadata()
        )


def test_a_session_prompted_forgotten_and_opened_again(
    sam_ai: Any, sam_server: servers.Process, photos: dict[str, Path]
) -> None:
    with sam_ai.open_session(photos["chelsea.png"]) as session:
        assert session.session_id and (session.width, session.height) == (451, 300)
        first = session.segment(points=[(200, 150, True)], formats=["png", "rle"])
        assert first.session_id == session.session_id and not first.reopened
        np.testing.assert_array_equal(mask_of(first.best.png) > 0, first.best.rle.array())
        two = session.segment(prompts=[first_prompt(), second_prompt()])
        assert [len(o) for o in two.objects] == [1, 1]

        _forget(sam_server.address, session.session_id)
        again = session.segment(points=[(200, 150, True)], formats=["png", "rle"])
        assert again.reopened and session.reopened == 1 and again.best.png == first.best.png

        everything = session.segment_everything(points_per_side=2, pred_iou_thresh=0, stability_score_thresh=0)
        assert everything.points == 4 and everything.masks

        resumed = sam_ai.resume_session(session.session_id)  # by id alone, as a web gateway holds it
        assert resumed.segment(points=[(200, 150, True)]).best.png == first.best.png
        _forget(sam_server.address, session.session_id)
        with pytest.raises(CraftAiError) as raised:
            resumed.segment(points=[(200, 150, True)])  # no picture kept: not opened again
        assert raised.value.reason == "SESSION_NOT_FOUND"
        resumed.close()  # already gone: nothing happens


def first_prompt() -> Any:
    from craftai import Prompt

    return Prompt(points=[(100, 100, True)])


def second_prompt() -> Any:
    from craftai import Prompt

    return Prompt(box=(50, 40, 300, 260))


def test_segment_once_refuses_a_prompt_off_the_picture(sam_ai: Any, photos: dict[str, Path]) -> None:
    """Checked after decoding, before the encoder (its answers are parsed as a session's are)."""
    with pytest.raises(CraftAiError) as raised:
        sam_ai.segment_once(photos["chelsea.png"], points=[(9999, 150, True)])
    assert raised.value.reason == "BAD_PROMPT" and raised.value.violations
