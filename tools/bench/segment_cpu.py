#!/usr/bin/env python3
"""image.segment: the first request on a picture (OpenSession + first prompt) against later prompts
on the kept picture, through a real `craftai serve`, timed by the client (round trips).

The "Done when" figure of the segment issue: a later prompt must be at least 20 times faster than
the first request, because the encoder runs once per picture and each prompt runs only the mask
decoder. Each repetition opens a new session on each picture and times the first request, then
`--prompts` more prompts (a click moved each time, fg/bg and a box); the route is loaded and warmed
by one untimed request first, so model loading is not counted. Prints a table and writes JSON.

    .venv/bin/python -m tools.bench.segment_cpu                       # starts craftai serve with the fixture
    .venv/bin/python -m tools.bench.segment_cpu --repeats 5 --prompts 10 --json out/bench/segment_cpu.json
    .venv/bin/python -m tools.bench.segment_cpu --address 127.0.0.1:50051 --recipe sam2-hiera-tiny

Without --address it makes a temporary store, serves the SAM 2.1 random-weight fixture
(craftai_dev.sam21; needs the dev install: torch and sam2) from a loopback HTTP server, pins
it in a temporary catalogue as sam2-hiera-tiny, starts `craftai serve` (CRAFTAI_DEVICE=cpu unless
--device auto), sets the route up through the prepare service, and stops everything at the end.
The fixture has the published files' architecture and sizes, so its timings are the real model's.
With --address the route must already be set up there.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from craftai import AiClient, Point

REPO = Path(__file__).resolve().parents[2]

RECIPE = "sam2-hiera-tiny"
FEATURE = "image.segment"


@dataclass
class Repetition:
    picture: str
    width: int
    height: int
    open_ms: float
    first_prompt_ms: float
    later_ms: list[float]

    @property
    def first_ms(self) -> float:
        return self.open_ms + self.first_prompt_ms

    @property
    def ratio(self) -> float:
        return self.first_ms / statistics.median(self.later_ms)


# ------------------------------------------------------------------------------------------------
# a server with the fixture


@contextlib.contextmanager
def _serve_fixture(workdir: Path, device: str) -> Iterator[str]:
    """`craftai serve` on a new store with the fixture set up; yields its address."""
    from craftai_dev import sam21, segment
    from tools.bench import harness

    print("== the SAM 2.1 fixture (generated once into .cache/fixtures/)", flush=True)
    fixture = sam21.ensure_fixture()
    with harness.files_on_loopback(fixture.folder) as url:
        pins = {RECIPE: segment.fixture_pins(fixture, url)}
        recipes = harness.pinned_catalogue(workdir / "recipes.toml", pins)
        with harness.serve(workdir, {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": device}) as address:
            print(f"== craftai serve on {address}; setting {FEATURE} {RECIPE} up from {url}", flush=True)
            with AiClient(app_id="bench", target=address) as ai:
                list(ai.setup(FEATURE, RECIPE))
            yield address


# ------------------------------------------------------------------------------------------------
# timing


def _prompts(width: int, height: int, count: int) -> list[tuple[list[Point], tuple[float, float, float, float] | None]]:
    """A click moved each time, with a background click or a box every other prompt (deterministic)."""
    out: list[tuple[list[Point], tuple[float, float, float, float] | None]] = []
    for i in range(count):
        fx, fy = 0.2 + 0.6 * ((i * 0.37) % 1.0), 0.2 + 0.6 * ((i * 0.61) % 1.0)
        click = Point(fx * width, fy * height)
        if i % 3 == 1:
            out.append(([click, Point(0.05 * width, 0.05 * height, foreground=False)], None))
        elif i % 3 == 2:
            out.append(([click], (0.1 * width, 0.1 * height, 0.9 * width, 0.9 * height)))
        else:
            out.append(([click], None))
    return out


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def measure(ai: AiClient, pictures: list[Path], repeats: int, prompts: int, recipe: str) -> list[Repetition]:
    print("== warm-up (route load, first runs; not counted)", flush=True)
    with ai.open_session(pictures[0], recipe=recipe) as warm:
        warm.segment(points=[Point(warm.width / 2, warm.height / 2)])
    done = []
    for repeat in range(repeats):
        for path in pictures:
            started = time.perf_counter()
            session = ai.open_session(path, recipe=recipe)
            open_ms = _ms(started)
            plan = _prompts(session.width, session.height, prompts + 1)
            started = time.perf_counter()
            session.segment(points=plan[0][0], box=plan[0][1])
            first_prompt_ms = _ms(started)
            later = []
            for points, box in plan[1:]:
                started = time.perf_counter()
                answer = session.segment(points=points, box=box)
                later.append(_ms(started))
                assert not answer.reopened, "the session was forgotten during the benchmark"
            session.close()
            rep = Repetition(path.name, session.width, session.height, open_ms, first_prompt_ms, later)
            done.append(rep)
            print(
                f"  repetition {repeat + 1} {path.name}: first {rep.first_ms:.0f} ms, "
                f"later median {statistics.median(later):.1f} ms, ratio {rep.ratio:.1f}",
                flush=True,
            )
    return done


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
    from importlib import metadata

    runtime = "not installed here"
    for name in ("onnxruntime", "onnxruntime-gpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            runtime = f"{name} {metadata.version(name)}"
            break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average_at_start": load,
        "onnxruntime": runtime,
        "python": platform.python_version(),
        "system": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="a running server with the route set up (default: start one)")
    parser.add_argument("--recipe", default=RECIPE)
    parser.add_argument("--device", default="cpu", choices=["cpu", "auto"], help="for the server started here")
    parser.add_argument("--pictures", nargs="*", type=Path, help="default: chelsea.png and astronaut.png")
    parser.add_argument("--repeats", type=int, default=3, help="sessions per picture (default 3)")
    parser.add_argument("--prompts", type=int, default=5, help="later prompts per session (default 5)")
    parser.add_argument("--json", type=Path, default=REPO / "out" / "bench" / "segment_cpu.json")
    args = parser.parse_args(argv)
    if args.pictures:
        pictures = list(args.pictures)
    else:
        from craftai_dev.samples import photos

        pictures = [photos()[name] for name in ("chelsea.png", "astronaut.png")]
    machine = _machine()
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")

    with contextlib.ExitStack() as stack:
        address = args.address
        if address is None:
            workdir = Path(tempfile.mkdtemp(prefix="craftai-bench-"))
            stack.callback(shutil.rmtree, workdir, True)
            address = stack.enter_context(_serve_fixture(workdir, args.device))
        ai = stack.enter_context(AiClient(app_id="bench", target=address))
        runtime = ai.runtime()
        reps = measure(ai, pictures, args.repeats, args.prompts, args.recipe)

    first = [r.first_ms for r in reps]
    later = [ms for r in reps for ms in r.later_ms]
    summary = {
        "first_request_median_ms": statistics.median(first),
        "later_prompt_median_ms": statistics.median(later),
        "ratio_of_medians": statistics.median(first) / statistics.median(later),
        "smallest_ratio_of_a_repetition": min(r.ratio for r in reps),
    }
    print()
    header = f"{'picture':<16}{'size':>10}{'open ms':>10}{'1st prompt':>12}{'first ms':>10}{'later ms':>10}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    for r in reps:
        print(
            f"{r.picture:<16}{f'{r.width}x{r.height}':>10}{r.open_ms:>10.0f}{r.first_prompt_ms:>12.0f}"
            f"{r.first_ms:>10.0f}{statistics.median(r.later_ms):>10.1f}{r.ratio:>8.1f}"
        )
    print("-" * len(header))
    print(
        f"first request (OpenSession + first prompt) median {summary['first_request_median_ms']:.0f} ms; "
        f"later prompts median {summary['later_prompt_median_ms']:.1f} ms ({len(later)} prompts); "
        f"ratio {summary['ratio_of_medians']:.1f} "
        f"(smallest per repetition {summary['smallest_ratio_of_a_repetition']:.1f})"
    )
    report = {
        "benchmark": "segment_cpu",
        "date": started_at,
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "server": {"address": args.address or "started here", "device": runtime.device, "recipe": args.recipe},
        "settings": {"repeats": args.repeats, "prompts": args.prompts, "pictures": [p.name for p in pictures]},
        "summary": summary,
        "repetitions": [{**asdict(r), "first_ms": r.first_ms, "ratio": r.ratio} for r in reps],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
