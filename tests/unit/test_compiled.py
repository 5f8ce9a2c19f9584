"""engines.compiled: a compiler's failure falls back to the eager function, said once in the log;
the function's own errors are raised as they are. (The real inductor compile of the SAM grid
decoder is tests/gpu/test_cuda_routes.py's.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from craftai_infer.engines.compiled import Compiled


def _failing_backend(graph: Any, example_inputs: Any) -> Any:
    raise RuntimeError("Cannot find a working triton installation")


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2.0 + 1.0


def test_a_compiler_failure_falls_back_to_the_eager_function_once(caplog: pytest.LogCaptureFixture) -> None:
    fn = Compiled(_scaled, "the test function", backend=_failing_backend)
    x = torch.linspace(-1.0, 1.0, 9)
    with caplog.at_level(logging.WARNING, logger="craftai.infer.compiled"):
        first, second = fn(x), fn(x)
    assert fn.fell_back
    assert torch.equal(first, _scaled(x)) and torch.equal(second, _scaled(x))
    warnings = [r.getMessage() for r in caplog.records if r.name == "craftai.infer.compiled"]
    assert len(warnings) == 1, warnings
    assert "the test function" in warnings[0] and "triton" in warnings[0]


def test_the_functions_own_error_is_raised_not_hidden_by_a_fall_back() -> None:
    def checked(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != 4:
            raise ValueError(f"expected 4 values, got {x.shape[0]}")
        return x + 1

    fn = Compiled(checked, "the checked function", backend="eager")  # dynamo traces, no code generated
    assert torch.equal(fn(torch.zeros(4)), torch.ones(4))
    with pytest.raises(ValueError, match="expected 4 values, got 3"):
        fn(torch.zeros(3))
    assert not fn.fell_back
