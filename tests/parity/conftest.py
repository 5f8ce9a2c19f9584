"""Parity fixtures: SAM 2.1 tiny with random weights, as ONNX files and as Meta's reference predictor."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import sam_fixture


@pytest.fixture(scope="session")
def sam21_files() -> sam_fixture.Sam21Fixture:
    """encoder.onnx, decoder.onnx and weights.safetensors, exported once and cached across runs."""
    return sam_fixture.fixture()


@pytest.fixture(scope="session")
def sam21_reference_model(sam21_files: sam_fixture.Sam21Fixture) -> Any:
    """Meta's SAM2Base with the same random weights as the ONNX files (wrap it with
    sam_fixture.reference_predictor for SAM2ImagePredictor)."""
    return sam_fixture.reference_model(sam21_files.weights)
