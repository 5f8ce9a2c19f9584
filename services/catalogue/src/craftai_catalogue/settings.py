"""Catalogue settings (environment variables with the prefix CRAFTAI_)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from craftai_catalogue.recipes import DATA_FILE
from craftai_common.settings import ServerSettings


class CatalogueSettings(ServerSettings):
    recipes: Path = Field(DATA_FILE, description="the recipe data file (TOML)")
    infer_address: str = Field(
        "", description="the infer service, asked which routes are loaded (READY); empty: not asked"
    )
