"""Catalogue settings (environment variables with the prefix CRAFTAI_)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from craftai_catalogue.recipes import DATA_FILE
from craftai_common.settings import ServerSettings


class CatalogueSettings(ServerSettings):
    recipes: Path = Field(DATA_FILE, description="the recipe data file (TOML)")
    infer_address: str = Field(
        "",
        description="the infer service, asked which routes are loaded (READY) and, for engine advice when a "
        "caller gives no machine info, whether it has a GPU; empty: not asked (no GPU assumed)",
    )
    infer_timeout: float = Field(2.0, gt=0, le=30, description="seconds the infer service has to answer GetRuntime")
    machine_cache_seconds: float = Field(
        10.0, ge=0, description="how long the infer service's machine info is kept for engine advice"
    )
