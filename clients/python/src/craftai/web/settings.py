"""The gateway's settings: environment variables CRAFTAI_WEB_* (docs/OPERATIONS.md), read once at start."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1 << 20


class WebSettings(BaseSettings):
    """`craftai web` (and `craftai serve --web`)."""

    model_config = SettingsConfigDict(env_prefix="CRAFTAI_WEB_", extra="ignore")

    host: str = Field("127.0.0.1", description="address the gateway listens on")
    port: int = Field(8080, ge=0, le=65535, description="its port (0: any free port, written to ready_file)")
    target: str | None = Field(
        None, description="the services' gRPC address (default: CRAFTAI_ADDRESS, else 127.0.0.1:50051)"
    )
    infer: str | None = Field(
        None,
        description="the infer service's gRPC target when it is not at `target`: its replicas' one name "
        "(dns:///infer:50051) or address list (docs/DEPLOY.md, Scaling)",
    )
    app_id: str = Field(
        "craftai-web", description="the app id of requests that carry a key but no Craftai-App-Id header"
    )
    max_upload_bytes: int = Field(32 * MiB, gt=0, description="largest request body; larger ones get 413 at once")
    cors_origins: str = Field(
        "", description="comma-separated origins allowed to call the API from a browser ('' = CORS off)"
    )
    retry_seconds: float = Field(
        5.0, ge=0, description="how long a call waits for services that restart or drain before 503 is answered"
    )
    ready_file: Path | None = Field(None, description="written with the bound http://host:port once serving")
    allowed_hosts: str = Field(
        "",
        description="comma-separated Host names answered besides the loopback names and `host` ('*': any); "
        "other names are refused with 400 (DNS rebinding)",
    )
    header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        description="a request's line and headers arrive within this (from the connection or the "
        "previous answer), else 408 and the connection closed",
    )
    keep_alive_seconds: int = Field(5, ge=1, description="an idle connection between requests is closed after this")
    body_timeout_seconds: float = Field(
        20.0,
        gt=0,
        description="a body may keep the gateway waiting this long, plus a second per body_min_rate "
        "bytes received, else 408",
    )
    body_min_rate: int = Field(
        128 * 1024, gt=0, description="bytes per second a body must keep up beyond body_timeout_seconds"
    )
    max_header_bytes: int = Field(16 * 1024, ge=1024, description="the request line and headers together; larger: 431")
    max_connections: int = Field(
        256,
        gt=0,
        description="connections open at once (lowered to fit the process's descriptor limit); beyond: 503 and closed",
    )
    max_body_bytes: int = Field(
        8 * 32 * MiB,
        gt=0,
        description="request bodies held at once, in bytes (each its Content-Length, or max_upload_bytes when "
        "it has none, from its first byte read to its answer); beyond: 503 with Retry-After",
    )
    key_cache_seconds: float = Field(
        10.0, ge=0, description="how long the services' verdict on an app id and key is kept (by their hash)"
    )
    grace_seconds: float = Field(
        10.0, ge=0, description="on SIGTERM, the calls in flight get this long; then they are cancelled (503)"
    )

    @model_validator(mode="after")
    def _bodies_fit(self) -> Self:
        if self.max_body_bytes < self.max_upload_bytes:
            raise ValueError(
                f"CRAFTAI_WEB_MAX_BODY_BYTES ({self.max_body_bytes:,}) must hold one upload of "
                f"CRAFTAI_WEB_MAX_UPLOAD_BYTES ({self.max_upload_bytes:,})"
            )
        return self
