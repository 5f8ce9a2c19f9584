"""`craftai serve --gpus`'s plan (craftai.gpu_replicas): which GPUs a spec names, the replicas'
names, ports and the one target that reaches them all. The processes themselves:
tests/integration/test_serve_gpus.py."""

from __future__ import annotations

import pytest

from craftai import gpu_replicas


@pytest.mark.parametrize(
    ("spec", "visible", "found"),
    [
        ("all", "2,3", ["2", "3"]),  # the visible ones, as the machine's runtime sets them
        ("all", "", []),
        ("all", "-1", []),  # CUDA's way of hiding every GPU
        ("0,1", None, ["0", "1"]),
        (" 1 , 0 ", None, ["1", "0"]),
        ("GPU-8c1a2b3c-0000-1111-2222-333344445555", None, ["GPU-8c1a2b3c-0000-1111-2222-333344445555"]),
    ],
)
def test_a_spec_names_its_gpus(spec: str, visible: str | None, found: list[str]) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert gpu_replicas.gpus(spec, env) == found


@pytest.mark.parametrize(("spec", "words"), [("0,0", "names GPU 0 twice"), ("0;1", "not '0;1'"), ("", "not ''")])
def test_a_spec_that_names_no_gpu_list_is_refused_in_plain_words(spec: str, words: str) -> None:
    with pytest.raises(gpu_replicas.GpusError, match=words):
        gpu_replicas.gpus(spec, {})


def test_each_replica_has_its_gpu_its_name_and_its_ports() -> None:
    replicas = gpu_replicas.plan(["0", "1", "3"], "box")
    assert [(r.gpu, r.name, r.rank) for r in replicas] == [
        ("0", "box-gpu0", 0),
        ("1", "box-gpu1", 1),
        ("3", "box-gpu3", 2),
    ]
    # several a GPU: ranked one after the other, each GPU's first under the GPU's own name
    shared = gpu_replicas.plan(["0", "1"], "box", per_gpu=2)
    assert [(r.gpu, r.name, r.rank) for r in shared] == [
        ("0", "box-gpu0", 0),
        ("0", "box-gpu0-2", 1),
        ("1", "box-gpu1", 2),
        ("1", "box-gpu1-2", 3),
    ]
    with pytest.raises(gpu_replicas.GpusError, match="takes 1 or more, not 0"):
        gpu_replicas.plan(["0"], "box", per_gpu=0)
    env = {"CRAFTAI_PORT": "50051", "CRAFTAI_METRICS_PORT": "9100", "CRAFTAI_PROBE_PORT": "0"}
    assert gpu_replicas.ports_of(2, env) == {
        "CRAFTAI_PORT": "50053",
        "CRAFTAI_METRICS_PORT": "9102",
        "CRAFTAI_PROBE_PORT": "0",
    }
    assert gpu_replicas.ports_of(1, {"CRAFTAI_PORT": "0"}) == {"CRAFTAI_PORT": "0"}  # a free one each
    # one target for clients: every replica's address (a server on every interface: reached on loopback)
    assert gpu_replicas.target("0.0.0.0", 50051, replicas) == "ipv4:127.0.0.1:50051,127.0.0.1:50052,127.0.0.1:50053"


def test_each_replica_sizes_its_budgets_from_its_share_of_the_host() -> None:
    assert gpu_replicas.memory_share(3 << 30, 4, 64 << 30) == 3 << 30  # set: each replica's own
    assert gpu_replicas.memory_share(0, 4, 64 << 30) == 16 << 30
