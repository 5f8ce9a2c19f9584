"""Who may call, on real processes: app keys on every RPC but health and reflection, calls between
the three services authenticated with the service key, mutual TLS on every server, and the
plain-text probe port that serves only health."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from craftai import AiClient, CraftAiError, Retries, RouteState
from craftai_dev import certs, servers
from craftai_wire.keys import key_line, new_key
from craftai_wire.v1 import catalogue_pb2, catalogue_pb2_grpc, infer_pb2, infer_pb2_grpc

EDITOR_KEY, BATCH_KEY, SERVICE_KEY = new_key(), new_key(), new_key()
NO_RETRY = Retries(attempts=0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certs.Pki:
    return certs.make(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(
    pki: certs.Pki, local_catalogue: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, servers.Process]]:
    """catalogue, prepare and infer as separate processes, each with mutual TLS, an explicit keys
    file (two apps), the service key, and infer with a plain-text probe port; u2netp set up."""
    workdir = tmp_path_factory.mktemp("secure")
    keys = workdir / "keys"
    keys.write_text(key_line("editor", EDITOR_KEY) + key_line("batch", BATCH_KEY))
    keys.chmod(0o600)
    env = {
        "CRAFTAI_RECIPES": str(local_catalogue),
        "CRAFTAI_KEYS_FILE": str(keys),
        "CRAFTAI_SERVICE_KEY": SERVICE_KEY,
        "CRAFTAI_TLS_CERT": str(pki.server.cert),
        "CRAFTAI_TLS_KEY": str(pki.server.key),
        "CRAFTAI_TLS_CLIENT_CA": str(pki.ca),
        "CRAFTAI_TLS_CA": str(pki.ca),
        "CRAFTAI_CONFIG_DIR": str(workdir / "no-local-key"),  # nothing generated: the keys are explicit
    }
    processes = servers.separate(workdir / "store", workdir, env, probe=True)
    try:
        with _client(processes, pki) as ai:
            list(ai.setup("image.matte", "u2netp"))
        yield processes
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
        assert codes == {"catalogue": 0, "prepare": 0, "infer": 0}, codes
    assert not (workdir / "no-local-key").exists()


def _client(
    processes: dict[str, servers.Process], pki: certs.Pki, app: str = "editor", key: str | None = EDITOR_KEY
) -> AiClient:
    return AiClient(
        app,
        catalogue=processes["catalogue"].address,
        prepare=processes["prepare"].address,
        infer=processes["infer"].address,
        app_key=key,
        root_certificates=pki.ca,
        certificate_chain=pki.client.cert,
        private_key=pki.client.key,
        retries=NO_RETRY,
    )


def test_an_app_with_its_key_and_certificate_is_served_across_the_three_services(
    secure: dict[str, servers.Process], pki: certs.Pki, photos: dict[str, Path]
) -> None:
    with _client(secure, pki) as ai:
        result = ai.remove_background(photos["chelsea.png"], outputs="matte", request_id="security-matte-1")
        assert (result.width, result.height) == (451, 300) and result.request_id == "security-matte-1"
        states = {(r.route.recipe, r.route.engine): r.state for r in ai.status("image.matte")}
        assert states[("u2netp", "onnxruntime")] == RouteState.READY  # catalogue asked infer
    with _client(secure, pki, app="batch", key=BATCH_KEY) as ai:
        assert ai.remove_background(photos["chelsea.png"], outputs="matte").width == 451
    # infer asked the catalogue as craftai-internal, with the service key, over mutual TLS.
    assert '"app_id": "craftai-internal"' in secure["catalogue"].logs()
    assert '"request_id": "security-matte-1"' in secure["catalogue"].logs()  # the id travelled with it


@pytest.mark.parametrize(
    ("app", "key", "reason"),
    [
        ("editor", None, "MISSING_APP_KEY"),
        ("editor", "craftai_not-the-key", "BAD_APP_KEY"),
        ("editor", BATCH_KEY, "BAD_APP_KEY"),  # another app's key
        ("stranger", EDITOR_KEY, "BAD_APP_KEY"),  # an app id the keys file does not know
        ("craftai-internal", EDITOR_KEY, "BAD_APP_KEY"),  # only the service key makes a service
    ],
    # ids without the random keys: every process that collects (pytest-xdist's workers) names them alike
    ids=["no key", "not a key", "another app's key", "unknown app", "an app's key for the service id"],
)
def test_a_missing_or_wrong_key_is_unauthenticated_and_logged_without_the_key(
    secure: dict[str, servers.Process],
    pki: certs.Pki,
    photos: dict[str, Path],
    app: str,
    key: str | None,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("CRAFTAI_APP_KEY_FILE", str(tmp_path / "no-key-here"))  # else the SDK sends the local key
    with _client(secure, pki, app=app, key=key) as ai, pytest.raises(CraftAiError) as caught:
        ai.remove_background(photos["chelsea.png"], outputs="matte")
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAUTHENTICATED, reason)
    assert caught.value.request_id  # the server's id for this refusal, as logged
    logs = secure["infer"].logs()
    assert f'"reason": "{reason}"' in logs and caught.value.request_id in logs
    for secret in (EDITOR_KEY, BATCH_KEY, SERVICE_KEY, "craftai_not-the-key"):
        assert secret not in logs


def _secure_channel(address: str, pki: certs.Pki, client: certs.Pair | None) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        pki.ca.read_bytes(),
        client.key.read_bytes() if client else None,
        client.cert.read_bytes() if client else None,
    )
    return grpc.secure_channel(address, credentials)


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "plain text"])
def test_mutual_tls_refuses_a_client_without_a_certificate_of_the_ca(
    secure: dict[str, servers.Process], pki: certs.Pki, who: str
) -> None:
    address = secure["catalogue"].address
    if who == "plain text":
        channel = grpc.insecure_channel(address)
    else:
        channel = _secure_channel(address, pki, None if who == "no certificate" else pki.stranger)
    metadata = (("craftai-app-id", "editor"), ("craftai-app-key", EDITOR_KEY))
    with channel, pytest.raises(grpc.RpcError) as caught:
        catalogue_pb2_grpc.CatalogueServiceStub(channel).ListFeatures(
            catalogue_pb2.ListFeaturesRequest(), metadata=metadata, timeout=5
        )
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake failed: no RPC reached it


def test_health_and_reflection_need_no_key_and_the_probe_port_serves_only_health(
    secure: dict[str, servers.Process], pki: certs.Pki
) -> None:
    infer = secure["infer"]
    with _secure_channel(infer.address, pki, pki.client) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        assert "craftai.v1.InferService" in {s.name for s in next(iter(stream)).list_services_response.service}
    assert infer.probe_address
    with grpc.insecure_channel(infer.probe_address) as probe:
        reply = health_pb2_grpc.HealthStub(probe).Check(
            health_pb2.HealthCheckRequest(service="craftai.v1.InferService"), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as caught:
            infer_pb2_grpc.InferServiceStub(probe).GetRuntime(
                infer_pb2.GetRuntimeRequest(), metadata=(("craftai-app-id", "editor"),), timeout=5
            )
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_tls_without_client_certificates_and_keys_from_the_environment(
    pki: certs.Pki, local_catalogue: Path, tmp_path: Path, photos: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`craftai serve` with TLS only: the SDK verifies it with CRAFTAI_TLS_CA and sends the key from
    CRAFTAI_APP_KEY; the embedded services reach each other over TLS too."""
    keys = tmp_path / "keys"
    keys.write_text(key_line("*", EDITOR_KEY))
    env = {
        "CRAFTAI_RECIPES": str(local_catalogue),
        "CRAFTAI_KEYS_FILE": str(keys),
        "CRAFTAI_TLS_CERT": str(pki.server.cert),
        "CRAFTAI_TLS_KEY": str(pki.server.key),
        "CRAFTAI_TLS_CA": str(pki.ca),
    }
    process = servers.embedded(tmp_path / "store", tmp_path, env)
    with servers.running(process):
        monkeypatch.setenv("CRAFTAI_TLS_CA", str(pki.ca))
        monkeypatch.setenv("CRAFTAI_APP_KEY", EDITOR_KEY)
        with AiClient("any-app", target=process.address) as ai:
            list(ai.setup("image.matte", "u2netp"))
            assert ai.remove_background(photos["chelsea.png"], outputs="matte").width == 451
        monkeypatch.delenv("CRAFTAI_TLS_CA")
        started = time.monotonic()
        with AiClient("any-app", target=process.address) as ai, pytest.raises(CraftAiError) as caught:
            ai.runtime()  # plain text against a TLS port
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 15  # never reached: the SDK does not wait for it to come back
