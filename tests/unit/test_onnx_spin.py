"""onnxruntime's CPU threads sleep between runs unless CRAFTAI_CPU_SPIN asks them to spin (issue 19)."""

from __future__ import annotations

from typing import Any

import pytest

from craftai_dev.files import u2netp_onnx
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.u2netp_onnx import U2netpOnnx
from craftai_infer.settings import InferSettings
from craftai_models.onnx_sessions import open_session


def _spinning(session: Any) -> str:
    """The session's allow_spinning entry; "" when unset (onnxruntime's default: its threads spin)."""
    try:
        return str(session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning"))
    except RuntimeError as exc:  # onnxruntime: "SessionOptions does not have configuration with key"
        assert "does not have configuration" in str(exc)
        return ""


def test_open_session_spins_only_when_asked() -> None:
    assert _spinning(open_session(u2netp_onnx(), "cpu", spin=False)) == "0"
    assert _spinning(open_session(u2netp_onnx(), "cpu", spin=True)) == ""


@pytest.mark.parametrize(("value", "expected"), [(None, "0"), ("1", "")])
def test_the_setting_reaches_the_route(monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str) -> None:
    if value is None:
        monkeypatch.delenv("CRAFTAI_CPU_SPIN", raising=False)
    else:
        monkeypatch.setenv("CRAFTAI_CPU_SPIN", value)
    route = U2netpOnnx(RouteFiles({"network": u2netp_onnx()}, None, 0, cpu_spin=InferSettings().cpu_spin), "cpu")
    assert _spinning(route.model.session) == expected
