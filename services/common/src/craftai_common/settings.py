"""Settings shared by every service: environment variables with the prefix CRAFTAI_.

Each service has one settings object that extends `ServerSettings`; docs/OPERATIONS.md lists
every variable.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
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
