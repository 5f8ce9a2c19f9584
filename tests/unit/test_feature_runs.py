"""features/run.py `stream`: a run's events in order, and its result written in place.

A feature that writes its answer into `run.result(kind)` is answered by that very message (no copy:
protobuf's upb runtime copies a message put into another by serialising and parsing it); one that
builds its result apart is copied in, as before; an answer whose fields are all defaults is still
sent as a result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from craftai_infer.features import run as runs
from craftai_wire.v1 import infer_pb2


async def _events(work: Callable[[runs.Run], Awaitable[Any]]) -> list[infer_pb2.MatteEvent]:
    return [event async for event in runs.stream(infer_pb2.MatteEvent, work)]


def test_a_result_written_in_place_is_the_final_event_itself() -> None:
    written: list[infer_pb2.MatteResult] = []

    async def work(run: runs.Run) -> infer_pb2.MatteResult:
        run.stages = ("model",)
        with run.stage("model", "removing the background"):
            await asyncio.sleep(0)
        result = run.result(infer_pb2.MatteResult)
        result.width, result.height = 3, 2
        result.matte.data = b"\x89PNG..."
        written.append(result)
        return result

    events = asyncio.run(_events(work))
    assert [e.WhichOneof("event") for e in events] == ["progress", "result"]
    final = events[-1]
    assert (final.result.width, final.result.height, final.result.matte.data) == (3, 2, b"\x89PNG...")
    final.result.width = 5  # the same message the feature wrote, not a copy of it
    assert written[0].width == 5


def test_a_result_built_apart_is_copied_in_and_a_default_result_is_still_a_result() -> None:
    async def apart(run: runs.Run) -> infer_pb2.MatteResult:
        return infer_pb2.MatteResult(width=7)

    async def defaults(run: runs.Run) -> infer_pb2.MatteResult:
        return run.result(infer_pb2.MatteResult)

    (made,) = asyncio.run(_events(apart))
    assert made.WhichOneof("event") == "result" and made.result.width == 7
    (empty,) = asyncio.run(_events(defaults))
    assert empty.WhichOneof("event") == "result" and empty.result == infer_pb2.MatteResult()


def test_a_run_answers_one_kind_of_result() -> None:
    run = runs.Run()
    assert run.result(infer_pb2.SegmentResult) is run.result(infer_pb2.SegmentResult)
    with pytest.raises(TypeError, match="answers SegmentResult, not MatteResult"):
        run.result(infer_pb2.MatteResult)
