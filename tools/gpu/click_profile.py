"""Where a SAM click's time goes (issue 13: 19.2 ms through gRPC, its model stage 7.3 ms against
2.8 ms in-process), in one run on one machine (STEPS=click):

1. in this process, the torch route built from the prepared folder the server set up: the route's
   decode alone, then through `LoadedRoute.submit` from an event loop (the batcher and the hop to
   the model's worker thread, as the servicer calls it);
2. through gRPC (`craftai serve`): the round trip and the server's stages, for each server variant
   (VARIANTS: as configured, batching off, Python's GIL switch interval at 0.5 ms), one server each;
3. py-spy on the first server during the clicks (every thread, and the GIL holder alone), when
   it is installed (on the GPU machine, from .whl/).

    python3 tools/gpu/click_profile.py --out DIR                      # the GPU machine
    python3 tools/gpu/click_profile.py --tiny --device cpu --out DIR  # here: every part, a few clicks

Writes click_profile.json and click_profile.md under --out.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for src in ("clients/wire/src", "clients/python/src", "."):
    if str(REPO / src) not in sys.path:
        sys.path.insert(0, str(REPO / src))

from tools.bench import harness  # noqa: E402
from tools.gpu import pyspy  # noqa: E402

# name -> the server's extra environment; "switch" puts a sitecustomize on the server's path.
VARIANTS: dict[str, dict[str, str]] = {"as configured": {}, "batching off": {"CRAFTAI_MAX_BATCH": "1"}, "switch": {}}
SWITCH_INTERVAL_S = 0.0005


def percentiles(samples: list[float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in harness.percentiles(samples).items()}


def timed(fn: Callable[[], Any], reps: int, warmup: int) -> dict[str, float]:
    return percentiles(harness.timed_ms(fn, reps, warmup))


def inprocess(work: Path, device: str, picture: bytes, size: tuple[int, int], reps: int) -> dict[str, Any]:
    """The route's decode alone, and the same through LoadedRoute.submit from an event loop."""
    import numpy as np
    from PIL import Image

    from craftai_infer.loader import LoadedRoute, Notices
    from craftai_infer.pipelines.segment_sam import SamPrompt
    from craftai_infer.routes import DECODE, DecodeRequest
    from craftai_infer.routes.sam2_torch import Sam2Torch
    from craftai_wire.v1 import common_pb2
    from tools.bench import run

    warmup = min(20, reps)
    rgb = np.asarray(Image.open(io.BytesIO(picture)).convert("RGB"))
    w, h = size
    click = SamPrompt(points=[(w * 0.5, h * 0.45)], labels=[1])
    route, files = run.sam_torch_route(work, device)
    embedding = route.encode([rgb])[0]
    request = DecodeRequest(embedding, (click,), (False,))
    results: dict[str, Any] = {"route.decode": timed(lambda: route.decode([request]), reps, warmup)}
    runner = route.runner

    def network_only() -> None:
        _, masks, _ = runner._decode_network([(embedding, click)])
        masks.cpu()

    results["decoder network, logits read back"] = timed(network_only, reps, warmup)
    ref = common_pb2.RouteRef(feature="image.segment", recipe="sam2-hiera-tiny", engine="torch")
    loaded = LoadedRoute(ref, route, Sam2Torch, files)

    async def loop() -> list[float]:
        samples = []
        for k in range(reps + warmup):
            started = time.perf_counter()
            await loaded.submit(DECODE, request, Notices([]), key=(2,))
            if k >= warmup:
                samples.append((time.perf_counter() - started) * 1000)
        return samples

    try:
        results["LoadedRoute.submit from an event loop"] = percentiles(asyncio.run(loop()))
    finally:
        loaded.close()
    return results


@contextmanager
def variant_env(name: str) -> Iterator[dict[str, str]]:
    env = dict(VARIANTS[name])
    if name != "switch":
        yield env
        return
    with tempfile.TemporaryDirectory(prefix="click-switch-") as folder:
        Path(folder, "sitecustomize.py").write_text(f"import sys\nsys.setswitchinterval({SWITCH_INTERVAL_S})\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH", "")) if p)
        yield env


def served(
    variant: str, device: str, picture: bytes, size: tuple[int, int], *, reps: int, out: Path, spy: bool
) -> dict[str, Any]:
    """Clicks through gRPC on one server: round trips, and the server's stages of each click."""
    from craftai import AiClient
    from tools.bench import run

    w, h = size
    with variant_env(variant) as env, run.sam_served(device, env) as server:
        with AiClient(app_id="bench", target=server.address) as ai:
            session = ai.open_session(picture, "sam2-hiera-tiny", "torch")  # loads and warms the route
            for _ in range(10 if reps > 5 else 1):
                session.segment([(w * 0.5, h * 0.45, True)])
            trips: list[float] = []
            stages: dict[str, list[float]] = {}
            spies = [pyspy.record(server.pid, 8, out, gil) for gil in (False, True)] if spy else []
            deadline = time.monotonic() + (9.0 if spies and any(spies) else 0.0)
            while len(trips) < reps or time.monotonic() < deadline:
                started = time.perf_counter()
                answer = session.segment([(w * 0.5, h * 0.45, True)])
                trips.append((time.perf_counter() - started) * 1000)
                for k, v in answer.timing_ms.items():
                    stages.setdefault(k, []).append(v)
            for process in spies:
                if process is not None:
                    process.wait(60)
            session.close()
            result: dict[str, Any] = {
                "round_trip_ms": percentiles(trips),
                "server_stage_ms_median": {k: round(statistics.median(v), 3) for k, v in stages.items()},
                "device": ai.runtime().device,
            }
        if variant == "as configured":  # the same files, in this process, while the server idles
            result["inprocess"] = inprocess(server.log.parent, result["device"], picture, size, reps)
        return result


def report(results: dict[str, Any]) -> str:
    lines = [
        f"SAM click, {results['picture']} on {results['device']}",
        "",
        "| where | p50 ms | p90 ms |",
        "|---|---|---|",
    ]
    for name, p in results.get("inprocess", {}).items():
        lines.append(f"| in-process: {name} | {p['p50']:.2f} | {p['p90']:.2f} |")
    for name, r in results["served"].items():
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["server_stage_ms_median"].items())
        p = r["round_trip_ms"]
        lines.append(f"| through gRPC, server {name} (server: {stages}) | {p['p50']:.2f} | {p['p90']:.2f} |")
    lines += pyspy.report_lines(results.get("profiles", {}))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    from tools.bench import run

    size = (256, 192) if options.tiny else (2048, 1536)
    reps = 3 if options.tiny else 300
    picture = run.jpeg(size)
    results: dict[str, Any] = {"picture": f"{size[0]}x{size[1]} JPEG", "served": {}}
    for k, variant in enumerate(VARIANTS):
        try:
            results["served"][variant] = served(
                variant, options.device, picture, size, reps=reps, out=options.out, spy=k == 0 and not options.tiny
            )
        except Exception as exc:  # one variant failing still leaves the others' figures
            results["served"][variant] = {"error": repr(exc)}
        print(variant, results["served"][variant], flush=True)
    results["device"] = results["served"]["as configured"].get("device", options.device)
    results["inprocess"] = results["served"]["as configured"].pop("inprocess", {})
    results["profiles"] = pyspy.summaries(options.out)
    harness.write_report(options.out, "click_profile", results, report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
