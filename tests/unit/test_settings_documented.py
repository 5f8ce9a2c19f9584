"""Every setting of every service, and of the web gateway, is in docs/OPERATIONS.md's tables, under
its environment name: a setting added without a line there fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from craftai.web.settings import WebSettings
from craftai_catalogue.settings import CatalogueSettings
from craftai_infer.settings import InferSettings
from craftai_prepare.settings import PrepareSettings

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md"


@pytest.mark.parametrize("settings", [CatalogueSettings, PrepareSettings, InferSettings, WebSettings])
def test_every_setting_has_a_row_in_operations_md(settings: type[BaseSettings]) -> None:
    first_cells = [
        line.split("|")[1] for line in OPERATIONS.read_text(encoding="utf-8").splitlines() if line.startswith("| ")
    ]
    documented = {name for cell in first_cells for name in re.findall(r"`(CRAFTAI_[A-Z0-9_]+)`", cell)}
    prefix = settings.model_config.get("env_prefix", "")
    assert prefix.startswith("CRAFTAI_")
    missing = [name for name in settings.model_fields if f"{prefix}{name.upper()}" not in documented]
    assert not missing, f"docs/OPERATIONS.md has no row for {[prefix + m.upper() for m in missing]}"
