"""The gateway's settings: environment variables CRAFTAI_WEB_* (docs/WEB.md), read once at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
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
