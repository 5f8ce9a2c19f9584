"""Settings shared by every service: environment variables with the prefix CRAFTAI_.

Each service has one settings object that extends `ServerSettings`; docs/OPERATIONS.md lists
every variable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "CRAFTAI_"
DEFAULT_PORT = 50051
MiB = 1 << 20


def default_store() -> Path:
    """The model store under the user's cache folder (XDG), as the embedded default."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "craftai"


class ServerSettings(BaseSettings):
    """What every gRPC server needs: where to listen, the store, message limits, shutdown grace."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0 in containers)")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="port to listen on (0 picks a free one)")
    store: Path = Field(default_factory=default_store, description="the model store folder")
    max_message_bytes: int = Field(64 * MiB, ge=MiB, le=1024 * MiB, description="largest gRPC message accepted or sent")
    grace_seconds: float = Field(10.0, ge=0, description="how long in-flight streams may finish on SIGTERM")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    ready_file: Path | None = Field(
        None, description="write the bound address here once serving (for supervisors and tests)"
    )
    log_format: Literal["json", "text"] = Field("json", description="json: one object per line; text: for people")

    # Who may call (docs/SECURITY.md).
    auth: Literal["on", "off"] = Field("on", description="check app keys; off only for a deliberate, isolated setup")
    keys_file: Path | None = Field(None, description="app key hashes; default <config>/keys (generated when absent)")
    keys: str = Field("", description="more '<app id> sha256:<hex>' entries, separated by ';' or newlines")
    tls_cert: Path | None = Field(None, description="PEM certificate chain of this server: TLS on")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    tls_client_ca: Path | None = Field(None, description="PEM CA bundle for client certificates: mutual TLS")
    tls_ca: Path | None = Field(None, description="PEM CA bundle to verify the other services (default: system)")
    probe_port: int | None = Field(
        None, ge=0, le=65535, description="plain-text port serving only grpc.health.v1 (probes when TLS is on)"
    )

    local_tls: Literal["auto", "off"] = Field(
        "auto", description="auto: a loopback server without TLS speaks TLS with the local certificate"
    )

    # Limits (docs/SECURITY.md, "Limits").
    max_requests_per_app: int = Field(16, ge=0, description="RPCs in progress per app id; 0: no limit")
    max_wildcard_requests: int = Field(
        32, ge=0, description="RPCs in progress of every app id admitted by a '*' key (or with keys off), together"
    )
    max_requests: int = Field(64, ge=0, description="RPCs in progress from apps per service; 0: no limit")
    max_internal_requests: int = Field(64, ge=0, description="RPCs in progress between the services")
    max_open_streams: int = Field(64, ge=0, description="grpc.health.v1 Watch and reflection streams open at once")
    max_call_seconds: float = Field(900.0, gt=0, description="the longest any RPC may run (setups: their own)")
    stalled_write_seconds: float = Field(
        30.0, gt=0, description="a stream whose message waited this long (+1 s per MiB) for its reader is ended"
    )
    max_connection_age_seconds: float = Field(
        1800.0, ge=0, description="connections are renewed after this (a stalled stream's last bytes freed); 0: never"
    )

    # Observability (docs/OBSERVABILITY.md).
    metrics_port: int | None = Field(None, ge=0, le=65535, description="Prometheus /metrics port; unset: off")
    metrics_host: str | None = Field(None, description="address of the metrics port (default: host)")

    @model_validator(mode="after")
    def _tls_pairs(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("CRAFTAI_TLS_CERT and CRAFTAI_TLS_KEY go together: set both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("CRAFTAI_TLS_CLIENT_CA (mutual TLS) needs CRAFTAI_TLS_CERT and CRAFTAI_TLS_KEY")
        return self
