"""The `craftai` command's parts that need no server: its version, the choices its help lists, its
progress (bars on a terminal, plain lines in a log) and the download figure `craftai models` shows."""

from __future__ import annotations

import io
import sys
from importlib import metadata

import pytest

from craftai.cli import main
from craftai.cli.models import download
from craftai.cli.progress import Bar
from craftai.installation import RecipeInfo, RecipeRoute
from craftai_wire.vocabulary import RECIPES_OF, Engine, Feature

OF_COMMAND = {"remove-background": Feature.MATTE, "segment": Feature.SEGMENT, "segment-all": Feature.SEGMENT}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"craftai {metadata.version('craftai')}"


@pytest.mark.parametrize("command", ["setup", "remove-background", "segment", "segment-all"])
def test_the_help_lists_the_recipes_and_engines(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    features = list(RECIPES_OF) if command == "setup" else [OF_COMMAND[command]]
    for feature in features:
        for recipe in RECIPES_OF[feature]:
            assert recipe in shown, (command, recipe)
    assert "{" + ",".join(Engine) + "}" in shown


def test_status_and_serve_say_what_they_take(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "one feature's routes only: image.matte or image.segment" in shown
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--stop" in shown and "--idle-minutes" in shown


class _Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def _drawn(terminal: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    stream = _Stream(terminal)
    monkeypatch.setattr(sys, "stderr", stream)
    bar = Bar("download", "bytes")
    for done in range(0, 4_000_001, 100_000):
        bar.show(done, 4_000_000, "fetching u2netp.onnx")
    bar.close()
    return stream.getvalue()


def test_progress_is_plain_lines_when_not_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _drawn(False, monkeypatch)
    assert "\r" not in plain and "\x1b" not in plain
    lines = plain.splitlines()
    assert lines[0] == "download: fetching u2netp.onnx [0 B of 3.8 MiB (0%)]"
    assert lines[-1] == "download: fetching u2netp.onnx [3.8 MiB of 3.8 MiB (100%)]"
    assert len(lines) == 5  # its start and each quarter, not one line a step
    drawn = _drawn(True, monkeypatch)
    assert "\r" in drawn  # a bar, on a terminal


def _recipe(*sizes: tuple[str, int]) -> RecipeInfo:
    """A recipe whose routes say what they download; no files: the figure is the catalogue's alone."""
    routes = tuple(RecipeRoute(engine, False, False, "", "", size) for engine, size in sizes)
    return RecipeInfo("r", "image.matte", "R", "n", "MIT", (), routes, True, "")


def test_models_shows_the_download_each_route_says() -> None:
    assert download(_recipe(("onnxruntime", 4_574_861), ("torch", 4_574_861))) == "4.6 MB"
    assert download(_recipe(("onnxruntime", 972_666_916), ("torch", 884_878_856))) == (
        "972.7 MB (onnxruntime), 884.9 MB (torch)"
    )
    assert download(_recipe(("onnxruntime", 0))) == "0.0 MB"
