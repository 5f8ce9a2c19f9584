"""What putting a message into another costs with protobuf's upb runtime, against writing it in place.

    .venv/bin/python -m tools.bench.proto_copies [--out DIR] [--tiny]

upb copies a message given to a constructor, to CopyFrom or to a repeated field's extend by
serialising and parsing it again; a bytes field set in place is not copied. Three messages of the
service, each built both ways (the way the code built them before 2026-12-04, and the project's
own functions now), the bytes each way serialises to compared, and the time to build them:

- the SDK's OpenSession request for a 1024x768 picture sent as its pixels (2.4 MB of PPM);
- a click's answer: three masks (1-bit PNGs) with their low-res logits (256x256 float32 each);
- a Matte event with a 4000x3000 cutout's PNG (~10 MB of incompressible bytes here).

The process's allocator is set as the service sets it (`craftai_infer.memory.prefer_mmap`: blocks
of 1 MiB and more mapped afresh), where a copy also faults its pages in; with glibc's own dynamic
threshold the figure depends on what the process freed before (a copy of 2.4 MB: 0.25-4.3 ms).

Writes proto_copies.json and proto_copies.md into --out; prints the table.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from craftai import calls
from craftai_infer import masks as answers
from craftai_infer import memory, prompts
from craftai_wire.v1 import common_pb2, infer_pb2
from tools.bench import harness

Build = Callable[[], Any]
FULL = ((1024, 768), 10_000_000, 1024, 20)  # the picture's size, the cutout's bytes, the masks' side, calls timed


def open_session(picture: bytes) -> tuple[Build, Build]:
    def put_in() -> infer_pb2.OpenSessionRequest:
        return infer_pb2.OpenSessionRequest(
            route=calls.route_ref(calls.SEGMENT_FEATURE), picture=common_pb2.Picture(data=picture)
        )

    return put_in, lambda: calls.open_session_request(picture)


def click(side: int) -> tuple[Build, Build]:
    rng = np.random.default_rng(0)
    mask = np.zeros((side, side), np.bool_)
    mask[side // 4 : side // 2, side // 3 : side // 2] = True
    logits = rng.standard_normal((256, 256)).astype(np.float32)
    output = answers.Output(frozenset({answers.PNG}))

    def put_in() -> infer_pb2.SegmentResult:
        written = []
        for _ in range(3):
            message = answers.written(mask, output, 1)
            message.low_res.CopyFrom(infer_pb2.LowResMask(logits=logits.astype("<f4").tobytes(), width=256, height=256))
            written.append(message)
        return infer_pb2.SegmentResult(masks=written, width=side, height=side)

    def in_place() -> infer_pb2.SegmentResult:
        result = infer_pb2.SegmentResult()
        for _ in range(3):
            message = answers.written(mask, output, 1, into=result.masks.add())
            prompts.low_res_message(logits, into=message.low_res)
        result.width, result.height = side, side
        return result

    return put_in, in_place


def matte_event(png: bytes) -> tuple[Build, Build]:
    def put_in() -> infer_pb2.MatteEvent:
        result = infer_pb2.MatteResult(width=4000, height=3000)
        result.cutout.CopyFrom(infer_pb2.MatteImage(data=png, has_alpha=True))
        return infer_pb2.MatteEvent(result=result)

    def in_place() -> infer_pb2.MatteEvent:
        event = infer_pb2.MatteEvent()
        result = event.result
        result.width, result.height = 4000, 3000
        result.cutout.data, result.cutout.has_alpha = png, True
        return event

    return put_in, in_place


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/bench/proto_copies"))
    parser.add_argument("--tiny", action="store_true", help="small messages, few repeats (the test's run)")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    memory.prefer_mmap()
    rng = np.random.default_rng(1)
    ppm_side, png_bytes, side, number = (
        ((64, 48), 20_000, 64, 2) if options.tiny else ((1024, 768), 10_000_000, 1024, 20)
    )
    width, height = ppm_side
    ppm = b"P6\n%d %d\n255\n" % (width, height) + rng.integers(0, 255, width * height * 3, dtype=np.uint8).tobytes()
    cases = {
        f"OpenSession request, {width}x{height} pixels ({len(ppm) / 1e6:.1f} MB)": open_session(ppm),
        f"a click's answer: 3 masks of {side}x{side} with their 256x256 logits": click(side),
        f"Matte event with a cutout PNG of {png_bytes / 1e6:.1f} MB": matte_event(rng.bytes(png_bytes)),
    }
    results: dict[str, Any] = {}
    rows = []
    for name, (put_in, in_place) in cases.items():
        same = put_in().SerializeToString() == in_place().SerializeToString()
        ms = {
            way: min(timeit.repeat(build, number=number, repeat=5)) / number * 1000
            for way, build in (("put_in", put_in), ("in_place", in_place))
        }
        results[name] = {"same_bytes": same, "ms": ms}
        rows.append(f"| {name} | {ms['put_in']:.3f} | {ms['in_place']:.3f} | {same} |")
    table = "\n".join(
        [
            "Building each message (ms, the best of 5 repeats): put into its parent against written in place",
            "",
            "| message | put in | in place | same bytes |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    harness.write_report(options.out, "proto_copies", results, table)
    print(table)
    return 0 if all(r["same_bytes"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
