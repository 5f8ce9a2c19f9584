"""Parity fixtures: Meta's reference predictor on the SAM 2.1 fixture's weights (the ONNX files are
`sam21_files` in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import sam_fixture


@pytest.fixture(scope="session")
def sam21_reference_model(sam21_files: sam_fixture.Sam21Fixture) -> Any:
    """Meta's SAM2Base with the same random weights as the ONNX files (wrap it with
    sam_fixture.reference_predictor for SAM2ImagePredictor)."""
    return sam_fixture.reference_model(sam21_files.weights)
