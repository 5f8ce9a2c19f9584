"""What InSPyReNet's route counts for a picture on the CPU (`working_bytes`: the pipeline's memory and
the network's activations) covers what one matte holds at its peak, in a fresh process
(tools/bench/working_memory.py; the larger cases and BiRefNet_lite are in docs/PERFORMANCE.md)."""

from __future__ import annotations

import pytest

from tools.bench import working_memory

pytestmark = pytest.mark.slow


def test_inspyrenet_counts_what_a_matte_holds_on_the_cpu() -> None:
    result = working_memory.measure("inspyrenet:320")
    assert 0 < result["peak_bytes"] <= result["counted_bytes"], result
