#!/usr/bin/env python3
"""Cutout sessions on the CPU: refinements of one keep click each on a large picture, against a real
`craftai serve` (u2netp's real weights for the matte, the SAM 2.1 random-weight fixture for the
regions), timed by the app (the round trip) and by the server (its total and its stages).

    .venv/bin/python -m tools.bench.cutout --out out/bench/cutout.json       # 2048x1536, 20 refinements
    .venv/bin/python -m tools.bench.cutout --size 640x480 --refinements 2 --out /tmp/cutout.json
    python3 -m tools.bench.cutout --device cuda --web --out out/gpu/cutout.json               # the GPU machine

The picture is the astronaut photo resized to --size with the coffee photo's middle pasted into its
lower right corner (a second subject, which the matte leaves out: the click is on it). One cutout
session is opened (not timed: the matte, the cutout's colours and the SAM embedding are made then),
one refinement warms the decoder, then each of --refinements sends one keep click (moved a few
pixels each time) as the whole prompt list, so each is one SAM decoder call, one region merged into
the whole matte and the outputs encoded. Reported: p50 and p90 of the round trip, of the server's
total (`server_ms`) and of its stages (`timing_ms`: "model", SAM's decoder; "merge", the region
feathered into the matte, the colours estimated again where alpha changed and the outputs made;
"encode"), and the pixels each refinement changed; written as JSON to --out.

With --web the same refinements go through `craftai web` too, as the page sends them (POST
/api/v1/cutouts/{id}/refine with the whole list, the outputs answered in JSON, base64): the round
trip is timed until the JSON is read and the outputs' bytes decoded. What the browser adds (the PNG
decoded and drawn) is not in it: tests/web measure the page in Chromium on the CPU.

Without --address it makes a temporary store and starts `craftai serve` with both routes set up
(tools/bench/load.py `serve_fixture`, CRAFTAI_DEVICE=--device; on a GPU both routes on --engine,
torch by default: onnxruntime's routes run on the CPU there); with --address both must be set up.
The fixture has the published SAM 2.1 architecture, so its decoder does the real model's work; its
regions are not a real model's (their size, hence the merge's work, varies with the click).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import io
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from craftai import AiClient, CutoutPrompt
from tools.bench import harness

REPO = Path(__file__).resolve().parents[2]
STAGES = ("model", "merge", "encode")  # a refinement's stages on the server (features/cutout.py)


@dataclass
class Refinement:
    """One refinement as the app and the server saw it."""

    round_trip_ms: float
    server_ms: float
    stages_ms: dict[str, float] = field(default_factory=dict)
    changed_pixels: int = 0


def composed(size: tuple[int, int]) -> bytes:
    """The astronaut photo at `size` with the coffee photo's middle in its lower right corner, as a PNG."""
    from craftai_dev.samples import photos

    found = photos()
    width, height = size
    base = Image.open(found["astronaut.png"]).convert("RGB").resize(size, Image.Resampling.BICUBIC)
    patch = Image.open(found["coffee.png"]).convert("RGB").resize((width // 3, height // 3), Image.Resampling.BICUBIC)
    base.paste(patch, (width - width // 3 - width // 64, height - height // 3 - height // 64))
    out = io.BytesIO()
    base.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def click(size: tuple[int, int], index: int) -> tuple[float, float]:
    """A click on the pasted subject, moved a few pixels each time."""
    width, height = size
    step = max(1, width // 512)
    return width - width / 6 + (index % 5 - 2) * step, height - height / 6 + (index % 3 - 1) * step


@dataclass(frozen=True)
class Work:
    """What each way of sending refinements is given."""

    picture: bytes
    size: tuple[int, int]
    refinements: int
    outputs: str
    engine: str | None
    recipe: str = "u2netp"


def measure(ai: AiClient, work: Work) -> tuple[float, list[Refinement]]:
    """The open's round trip (ms), then each timed refinement."""
    picture, size, refinements, outputs, engine = work.picture, work.size, work.refinements, work.outputs, work.engine
    started = time.perf_counter()
    with ai.open_cutout(picture, outputs=outputs, recipe=work.recipe, engine=engine, segment_engine=engine) as session:
        open_ms = (time.perf_counter() - started) * 1000
        print(f"== opened a {size[0]}x{size[1]} cutout session in {open_ms:.0f} ms; warming up", flush=True)
        session.refine([CutoutPrompt("keep", points=[click(size, -1)])])  # not counted
        done = []
        for index in range(refinements):
            prompt = CutoutPrompt("keep", points=[click(size, index)])
            started = time.perf_counter()
            answer = session.refine([prompt])
            took = (time.perf_counter() - started) * 1000
            assert not session.reopened, "the session was forgotten during the benchmark"
            stages = {name: answer.timing_ms.get(name, 0.0) for name in STAGES}
            done.append(Refinement(took, answer.server_ms, stages, session.changed_pixels))
            print(
                f"  refinement {index + 1}: {took:.0f} ms round trip, server {answer.server_ms:.0f} ms "
                f"({', '.join(f'{k} {v:.0f}' for k, v in stages.items())}), {session.changed_pixels} pixels changed",
                flush=True,
            )
    return open_ms, done


def through_web(gateway: str, key: str, work: Work) -> tuple[float, list[Refinement]]:
    """measure()'s refinements sent as the page sends them, through the web gateway at `gateway`."""
    picture, size, refinements, outputs, engine = work.picture, work.size, work.refinements, work.outputs, work.engine
    import httpx

    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": "bench-web"}
    params = {
        "outputs": outputs,
        "recipe": work.recipe,
        **({"engine": engine, "segment_engine": engine} if engine else {}),
    }
    with httpx.Client(base_url=gateway, headers=headers, timeout=300) as http:
        started = time.perf_counter()
        opened = http.post("/api/v1/cutouts", params=params, files={"picture": ("picture.png", picture, "image/png")})
        open_ms = (time.perf_counter() - started) * 1000
        if opened.status_code != 201:
            raise SystemExit(f"the gateway refused the cutout: {opened.status_code} {opened.text[:300]}")
        at = f"/api/v1/cutouts/{opened.json()['session_id']}"
        print(f"== through the gateway: opened in {open_ms:.0f} ms; warming up", flush=True)
        try:

            def refine(point: tuple[float, float]) -> dict[str, Any]:
                answer = http.post(f"{at}/refine", json={"prompts": [{"action": "keep", "points": [list(point)]}]})
                if answer.status_code != 200:
                    raise SystemExit(f"the gateway refused a refinement: {answer.status_code} {answer.text[:300]}")
                body: dict[str, Any] = answer.json()
                for output in body["outputs"].values():
                    base64.b64decode(output["data"])
                return body

            refine(click(size, -1))  # not counted
            done = []
            for index in range(refinements):
                started = time.perf_counter()
                body = refine(click(size, index))
                took = (time.perf_counter() - started) * 1000
                timing = body.get("timing_ms", {})
                stages = {name: float(timing.get(name, 0.0)) for name in STAGES}
                done.append(Refinement(took, float(body.get("server_ms", 0.0)), stages, int(body["changed_pixels"])))
                print(f"  refinement {index + 1} through the gateway: {took:.0f} ms round trip", flush=True)
        finally:
            http.delete(at)
    return open_ms, done


def summary(done: list[Refinement]) -> dict[str, Any]:
    """p50 and p90 (ms) of the round trip, the server's total and each stage; the pixels changed."""

    def stats(values: list[float]) -> dict[str, float]:
        found = harness.percentiles(values)
        return {"p50": round(found["p50"], 1), "p90": round(found["p90"], 1), "n": found["n"]}

    changed = sorted(r.changed_pixels for r in done)
    return {
        "round_trip_ms": stats([r.round_trip_ms for r in done]),
        "server_ms": stats([r.server_ms for r in done]),
        "stages_ms": {name: stats([r.stages_ms[name] for r in done]) for name in STAGES},
        "changed_pixels": {"min": changed[0], "p50": changed[len(changed) // 2], "max": changed[-1]},
    }


def _machine() -> dict[str, Any]:
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load: list[float] | None = None
    with contextlib.suppress(OSError, AttributeError):
        load = [round(v, 2) for v in os.getloadavg()]
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average_at_start": load, "python": platform.python_version()}


@contextlib.contextmanager
def _server(address: str | None, device: str, engine: str | None) -> Iterator[str]:
    """The address given, or a `craftai serve` started here with both routes set up (on `engine` too)."""
    if address is not None:
        yield address
        return
    from tools.bench.load import MATTE, SAM, serve_fixture

    print(f"== craftai serve on {device} with u2netp and the SAM 2.1 fixture (setting both up)", flush=True)
    with harness.scratch("bench-cutout-") as workdir, serve_fixture(workdir, {"CRAFTAI_DEVICE": device}) as served:
        if engine:
            with AiClient("bench-setup", target=served.address) as ai:
                list(ai.setup("image.segment", SAM, engine))
                list(ai.setup("image.matte", MATTE, engine))
        yield served.address


@contextlib.contextmanager
def _gateway(address: str) -> Iterator[tuple[str, str]]:
    """`craftai web` in front of `address`, and the local key it takes."""
    from craftai_dev import servers, web

    with (
        harness.scratch("bench-cutout-web-") as workdir,
        servers.running(web.gateway(address, workdir, command=[sys.executable, "-m", "craftai.cli"])) as gateway,
    ):
        yield gateway.address, servers.ensure_local_key()


def _size(text: str) -> tuple[int, int]:
    width, height = (int(v) for v in text.lower().split("x"))
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="a running server with u2netp and SAM set up (default: start one)")
    parser.add_argument(
        "--size", type=_size, default=(2048, 1536), help="the picture's WIDTHxHEIGHT (default 2048x1536)"
    )
    parser.add_argument("--refinements", type=int, default=20, help="timed refinements (default 20)")
    parser.add_argument("--outputs", default="cutout", help="the session's outputs (default: cutout, as PNG)")
    parser.add_argument("--device", default="cpu", help="the started server's CRAFTAI_DEVICE (cpu, cuda)")
    parser.add_argument(
        "--engine", default="", help="both routes' engine, set up too (default: the catalogue's; on a GPU: torch)"
    )
    parser.add_argument("--web", action="store_true", help="the refinements through `craftai web` too (as the page)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "cutout.json", help="the JSON file")
    args = parser.parse_args(argv)
    if args.refinements < 1:
        parser.error("--refinements must be at least 1")
    if not args.engine and args.device.startswith("cuda"):
        args.engine = "torch"  # onnxruntime's routes run on the CPU beside a GPU
    engine = args.engine or None
    machine = _machine()
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    picture = composed(args.size)
    web: dict[str, Any] | None = None
    with _server(args.address, args.device, engine) as address, AiClient(app_id="bench", target=address) as ai:
        device = ai.runtime().device
        work = Work(picture, args.size, args.refinements, args.outputs, engine)
        open_ms, done = measure(ai, work)
        if args.web:
            with _gateway(address) as (gateway, key):
                web_open_ms, web_done = through_web(gateway, key, work)
            web = {"open_ms": round(web_open_ms, 1), "summary": summary(web_done)}
    found = summary(done)
    width, height = args.size
    print()
    print(f"{args.refinements} refinements of one keep click, {width}x{height}, outputs {args.outputs} ({device})")
    print(f"{'':<28}{'p50 ms':>10}{'p90 ms':>10}")
    rows = [("round trip", found["round_trip_ms"]), ("server", found["server_ms"])]
    rows += [(name, found["stages_ms"][name]) for name in STAGES]
    if web is not None:
        rows += [("through the gateway", web["summary"]["round_trip_ms"])]
    for name, stats in rows:
        print(f"{name:<28}{stats['p50']:>10.1f}{stats['p90']:>10.1f}")
    print(f"pixels changed: {found['changed_pixels']}")
    report = {
        "benchmark": "cutout",
        "date": started_at,
        "command": " ".join(["tools/bench/cutout.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "server": {"address": args.address or "started here", "device": device, "engine": args.engine or "catalogue's"},
        "settings": {
            "size": f"{width}x{height}",
            "refinements": args.refinements,
            "outputs": args.outputs,
            "picture": "astronaut.png with coffee.png pasted",
        },
        "open_ms": round(open_ms, 1),
        "summary": found,
        "refinements": [asdict(r) for r in done],
        "web": web,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
