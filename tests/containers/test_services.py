"""The three images on one network with a shared store, driven from the host through the SDK.

The tests run in file order on one set of containers: status on a fresh store, setup (downloaded,
then brought by hand with `--from`), mattes,
concurrent apps, and last the infer container killed in the middle of a stream.
"""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image

from craftai import AiClient, CraftAiError, RouteState, SetupOutput
from craftai_dev import servers
from craftai_dev.files import U2NETP_SHA256, U2NETP_SIZE
from craftai_wire.v1 import common_pb2
from tests.containers import stack as st
from tools.docker.dockercli import docker_json

pytestmark = pytest.mark.containers

U2NETP = "models/u2netp/u2netp.onnx"


def _matte(ai: AiClient, picture: Path | bytes, engine: str = "onnxruntime") -> NDArray[np.uint8]:
    result = ai.remove_background(picture, outputs="matte", recipe="u2netp", engine=engine)
    assert (result.recipe, result.engine, result.device) == ("u2netp", engine, "cpu")
    return np.asarray(Image.open(io.BytesIO(result.matte_png)))


def _setup(ai: AiClient, engine: str = "onnxruntime") -> SetupOutput:
    events = list(ai.setup("image.matte", "u2netp", engine))
    result = events[-1]
    assert isinstance(result, SetupOutput)
    return result


def _state(ai: AiClient, engine: str = "onnxruntime") -> RouteState | None:
    return next(s.state for s in ai.status("image.matte", "u2netp") if s.route.engine == engine)


@pytest.fixture(scope="module")
def set_up(services: st.Stack) -> st.Stack:
    """u2netp set up in the shared store (only checked when the first test already did it)."""
    with services.client("tests") as ai:
        assert _setup(ai).files[0].sha256 == U2NETP_SHA256
    return services


def test_status_then_setup_through_the_separate_services(services: st.Stack) -> None:
    for container in (services.catalogue, services.prepare, services.infer):
        container.reload()
        health = container.get_wrapped_container().attrs["State"]["Health"]
        assert health["Status"] == "healthy", health  # the images' HEALTHCHECK (grpc.health.v1)
    with services.client("tests") as ai:
        runtime = ai.runtime()
        assert runtime.device == "cpu" and not runtime.gpu_available
        assert {"onnxruntime", "torch"} <= set(runtime.engines)
        assert _state(ai) == RouteState.MISSING
        first = _setup(ai)
        (outcome,) = first.files
        assert outcome.downloaded and outcome.source == f"http://files:{st.FILES_PORT}/good/u2netp.onnx"
        assert (outcome.size, outcome.sha256) == (U2NETP_SIZE, U2NETP_SHA256)
        assert _state(ai) == RouteState.PREPARED
        again = _setup(ai)
        assert again.already_done and again.files[0].source == "present"
    listing = st.store_listing(services.prepare)
    assert listing[U2NETP] == (U2NETP_SIZE, U2NETP_SHA256)
    assert not [p for p in listing if p.startswith("tmp/")]


def test_files_brought_by_hand_are_streamed_to_the_prepare_container(services: st.Stack, u2netp_file: Path) -> None:
    """`craftai setup --from` against a containerised server: the bytes travel over gRPC to prepare,
    which checks them and places them in the shared store (the host's files are not visible to it)."""
    removed = services.prepare.exec(["python", "-c", f"import os; os.remove('/store/{U2NETP}')"])
    assert removed.exit_code == 0, removed.output.decode(errors="replace")
    assert U2NETP not in st.store_listing(services.prepare)
    with services.client("tests") as ai:
        events = list(ai.setup("image.matte", "u2netp", "onnxruntime", from_path=u2netp_file))
        assert _state(ai) == RouteState.PREPARED
    result = events[-1]
    assert isinstance(result, SetupOutput) and not result.already_done
    assert result.files[0].source == f"brought: {u2netp_file}"
    listing = st.store_listing(services.prepare)
    assert listing[U2NETP] == (U2NETP_SIZE, U2NETP_SHA256)
    assert not [p for p in listing if p.startswith("tmp/")]  # the upload's own folder went with it


def test_the_services_run_as_the_image_user_on_a_read_only_root(services: st.Stack) -> None:
    for container, store_writable in ((services.catalogue, False), (services.prepare, True), (services.infer, False)):
        assert container.exec(["id", "-u"]).output.decode().strip() == "10001"
        assert container.exec(["touch", "/opt/craftai/x"]).exit_code != 0  # read-only root filesystem
        assert container.exec(["touch", "/tmp/x"]).exit_code == 0  # the documented tmpfs
        assert (container.exec(["touch", "/store/x"]).exit_code == 0) is store_writable
    services.prepare.exec(["rm", "-f", "/store/x"])


def test_the_catalogue_image_is_slim_and_the_torch_images_share_their_big_layer(
    services: st.Stack, images: dict[str, str]
) -> None:
    probe = "import importlib.util as u; print(sorted(m for m in ('torch', 'onnxruntime', 'onnx') if u.find_spec(m)))"
    assert services.catalogue.exec(["python", "-c", probe]).output.decode().strip() == "[]"
    assert services.infer.exec(["python", "-c", probe]).output.decode().strip() == "['onnx', 'onnxruntime', 'torch']"
    inspected = {name: docker_json(["image", "inspect", tag])[0] for name, tag in images.items()}
    size = {name: int(info["Size"]) for name, info in inspected.items()}
    assert size["catalogue"] < 350e6 and size["prepare"] < 1.6e9 and size["infer-cpu"] < 1.6e9, size
    layers = {name: info["RootFS"]["Layers"] for name, info in inspected.items()}
    # base, user, then the dependency layer (torch): the same layers, stored once.
    assert layers["prepare"][:3] == layers["infer-cpu"][:3]
    assert layers["catalogue"][:2] == layers["prepare"][:2]


def test_the_matte_equals_the_embedded_runs(
    set_up: st.Stack, matte_server: servers.Process, photos: dict[str, Path]
) -> None:
    """Same picture, same pinned file: the container and `craftai serve` on the host agree exactly."""
    with set_up.client("tests") as in_containers, AiClient("tests", target=matte_server.address) as embedded:
        for name in ("astronaut.png", "rocket.jpg"):
            mine, reference = _matte(in_containers, photos[name]), _matte(embedded, photos[name])
            assert mine.shape == reference.shape, name
            np.testing.assert_array_equal(mine, reference, err_msg=name)
        assert _state(in_containers) == RouteState.READY  # the catalogue asked infer


def test_two_apps_at_once(set_up: st.Stack, photos: dict[str, Path]) -> None:
    pictures = [photos["chelsea.png"], photos["coffee.png"]]
    results: dict[str, list[NDArray[np.uint8]]] = {}
    errors: list[BaseException] = []

    def app(app_id: str) -> None:
        try:
            with set_up.client(app_id) as ai:
                results[app_id] = [_matte(ai, p) for p in pictures]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=app, args=(name,)) for name in ("editor", "batch-tool")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert set(results) == {"editor", "batch-tool"}
    for picture, editor, batch in zip(pictures, results["editor"], results["batch-tool"], strict=True):
        np.testing.assert_array_equal(editor, batch, err_msg=picture.name)


def test_the_torch_route_is_converted_in_the_prepare_container_and_served_by_infer(
    set_up: st.Stack, photos: dict[str, Path]
) -> None:
    """The conversion extras of the prepare image (torch, onnx, onnxruntime) and torch in infer."""
    with set_up.client("tests") as ai:
        assert _state(ai, "torch") == RouteState.DOWNLOADED
        result = _setup(ai, "torch")
        assert result.prepared_now and result.revision.startswith("u2netp-torch.")
        assert _state(ai, "torch") == RouteState.PREPARED
        for name in ("chelsea.png", "rocket.jpg"):
            by_torch, by_onnx = _matte(ai, photos[name], "torch"), _matte(ai, photos[name])
            difference = np.abs(by_torch.astype(int) - by_onnx.astype(int))
            assert difference.max() <= 1, (name, difference.max())  # 8-bit rounding of the same matte
    listing = st.store_listing(set_up.prepare)
    assert f"prepared/u2netp/{result.revision}/manifest.json" in listing, sorted(listing)


def test_infer_killed_mid_stream_answers_unavailable_and_a_retry_after_restart_works(
    set_up: st.Stack, photos: dict[str, Path]
) -> None:
    before = st.store_listing(set_up.prepare)
    picture = st.large_picture(photos["chelsea.png"])
    stages: list[str] = []

    def kill_during_the_model(progress: common_pb2.Progress) -> None:
        stages.append(progress.stage)
        if progress.stage == "model":
            set_up.infer.get_wrapped_container().kill()

    with set_up.client("tests") as ai:
        with pytest.raises(CraftAiError) as caught:
            ai.remove_background(
                picture, outputs="matte", recipe="u2netp", engine="onnxruntime", on_progress=kill_during_the_model
            )
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE, caught.value
        assert stages[-1] == "model"

        set_up.infer.get_wrapped_container().start()
        st.wait_serving(set_up.address("infer"))
        # What an app does: retry once the service is back (the channel reconnects by itself).
        result = None
        for _ in range(20):
            try:
                result = ai.remove_background(picture, outputs="matte", recipe="u2netp", engine="onnxruntime")
                break
            except CraftAiError as exc:
                assert exc.code == grpc.StatusCode.UNAVAILABLE, exc
                time.sleep(0.5)
        assert result is not None and (result.width, result.height) == (451 * 13, 300 * 13)
        assert _state(ai) == RouteState.READY
    assert st.store_listing(set_up.prepare) == before  # the store is intact
