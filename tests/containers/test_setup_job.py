"""The one-time preparation Job's command (`craftai-setup`, as deploy/k8s runs it) in containers.

The prepare container is restarted in the middle of a download from a stalling source, while two
Jobs run at once (a doubled Job): both complete after the restart (the download resumes from the
partial file on the store volume), and nothing partial is visible under models/.
"""

from __future__ import annotations

import time
import uuid

import pytest
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from craftai_dev.files import U2NETP_SHA256, U2NETP_SIZE
from tests.containers import stack as st
from tests.containers.conftest import recipes_with

pytestmark = pytest.mark.containers

U2NETP = "models/u2netp/u2netp.onnx"


def _job(image: str, network: Network, name: str, addresses: dict[str, str]) -> DockerContainer:
    """The Job's pod: the catalogue image running craftai-setup, read-only, as its user."""
    return (
        DockerContainer(image)
        .with_network(network)
        .with_command(["craftai-setup", "image.matte:u2netp"])
        .with_envs(
            CRAFTAI_CATALOGUE_ADDRESS=addresses["catalogue"],
            CRAFTAI_PREPARE_ADDRESS=addresses["prepare"],
            CRAFTAI_INFER_ADDRESS=addresses["infer"],
            CRAFTAI_APP_ID="craftai-internal",  # the Job presents the service key (deploy/k8s/base/setup-job.yaml)
            CRAFTAI_APP_KEY=st.SERVICE_KEY,
            CRAFTAI_SETUP_WAIT_SECONDS="120",
        )
        .with_tmpfs_mount("/tmp", "size=64m")
        .with_kwargs(read_only=True, labels={st.LABEL: name})
    )


def _wait_for_log(container: DockerContainer, text: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while text not in st.logs(container):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} not logged within {seconds:.0f} s:\n{st.logs(container)}")
        time.sleep(0.2)


def test_prepare_restarted_during_a_download_and_a_doubled_job_both_complete(
    images: dict[str, str],
    network: Network,
    files: DockerContainer,
    services: st.Stack,
    docker_client: object,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    path = f"/stall/u2netp.onnx?{uuid.uuid4().hex[:8]}"  # first request: 1 MiB, then nothing
    recipes = recipes_with(tmp_path_factory, f"http://files:{st.FILES_PORT}{path}")
    with st.docker_volume(docker_client, "craftai-test-restart") as store:
        catalogue = st.service(
            images["catalogue"], "catalogue-r", network, store, env={"CRAFTAI_RECIPES": "/etc/craftai/recipes.toml"}
        ).with_volume_mapping(recipes, "/etc/craftai/recipes.toml", "ro")
        prepare = st.service(
            images["prepare"],
            "prepare-r",
            network,
            store,
            store_mode="rw",
            env={"CRAFTAI_CATALOGUE_ADDRESS": f"catalogue-r:{st.PORT}"},
        )
        addresses = {
            "catalogue": f"catalogue-r:{st.PORT}",
            "prepare": f"prepare-r:{st.PORT}",
            "infer": f"infer:{st.PORT}",
        }
        jobs = [_job(images["catalogue"], network, f"setup-job-{n}", addresses) for n in (1, 2)]
        try:
            st.start_all([catalogue, prepare])
            for job in jobs:
                job.start()
            _wait_for_log(files, f"GET {path} 1 -")  # the download has started (and stalls)
            prepare.get_wrapped_container().restart(timeout=1)  # SIGTERM, then SIGKILL after 1 s

            for job in jobs:
                exit_code = job.get_wrapped_container().wait(timeout=240)["StatusCode"]
                output = st.logs(job)
                assert exit_code == 0, output
                assert "craftai-setup: image.matte u2netp (onnxruntime):" in output, output
            # Carried over the restart by the SDK's retry of a server it had reached (20 s), or past
            # that by the job's own "asking again once the services serve"; either way both end well.
            # Fetched again after the restart, resuming the partial file left in the store's tmp/.
            (again,) = [line for line in st.logs(files).splitlines() if line.startswith(f"GET {path} 2 ")]
            resumed_at = int(again.rpartition("bytes=")[2].rstrip("-") or 0) if "bytes=" in again else 0
            assert resumed_at > 0, again

            listing = st.store_listing(prepare)
            assert listing[U2NETP] == (U2NETP_SIZE, U2NETP_SHA256)
            under_models = {p for p in listing if p.startswith("models/")}
            assert under_models == {U2NETP, "models/u2netp/.verified/u2netp.onnx.json"}, listing
            # The killed download's partial file, if any, stays under tmp/ (never visible as complete).
            assert all(p.startswith(("tmp/", "locks/", "models/")) for p in listing), listing
        finally:
            for container in (*jobs, prepare, catalogue):
                st.stop(container)
