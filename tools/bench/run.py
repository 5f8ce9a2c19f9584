"""The benchmark anyone can rerun: this project against the peers, same machine, same weights, one run.

    python -m tools.bench.run                       # everything, on the GPU when one answers
    python -m tools.bench.run --tiny --device cpu   # a quick check that every section runs (CI)
    python -m tools.bench.run --sections sam_grpc,u2netp_cpu --out out/bench

Sections (each writes into --out; bench.json and bench.md gather them):
- sam_inprocess: SAM 2.1 tiny, this project's torch route in-process against Meta's
  SAM2ImagePredictor (tools/bench/sam_gpu.py): picture set (2048x1536), click, box.
- sam_grpc: the same route through `craftai serve` on loopback: click round trip (mask PNG
  included), picture set (OpenSession), and encoder throughput at concurrency 1, 8 and 32.
- matte_inprocess: InSPyReNet at 1024 and 1280 against transparent-background's network, and the
  whole pipeline at 1280x960 and 4000x3000 (tools/bench/matte_gpu.py).
- matte_grpc: InSPyReNet through `craftai serve`: the Matte round trip at 1280x960 and 4000x3000.
- matte_outputs: what each output costs over the plain matte at 4000x3000 (tools/bench/matte_outputs.py):
  foreground estimation against pymatting's, each output made on the device, each encoder, and
  InSPyReNet through `craftai serve` with each set of outputs.
- u2netp_cpu: u2netp on the CPU through `craftai serve` (onnxruntime route, rembg-compatible; and
  the opt-in openvino route when the package is installed) against rembg's own
  `remove(only_mask=True)` on the same photos: pictures per second with 1 and 2 concurrent
  clients, and a check that each gives rembg's matte (openvino: within 1/255).
Weights: random-weight SAM 2.1 and InSPyReNet fixtures (the published files cannot be had here;
same architecture and sizes), the real u2netp file.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from craftai import AiClient
from tools.bench import harness

REPO = Path(__file__).resolve().parents[2]

if TYPE_CHECKING:
    from craftai_infer.routes import Precision

SECTIONS = ("sam_inprocess", "sam_grpc", "matte_inprocess", "matte_grpc", "matte_outputs", "u2netp_cpu")


def throughput(make_call: Callable[[int], Callable[[], Any]], concurrency: int, seconds: float) -> float:
    """Calls per second of `concurrency` threads each repeating its own call for `seconds` (each
    makes at least one call: `seconds=0` is one call per thread, what the tiny run checks)."""
    counts = [0] * concurrency
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        call = make_call(i)
        while True:
            call()
            counts[i] += 1
            if time.monotonic() >= stop:
                break

    started = time.monotonic()
    harness.in_threads(worker, concurrency)
    return sum(counts) / (time.monotonic() - started)


# ---- SAM --------------------------------------------------------------------------------------


@contextlib.contextmanager
def sam_served(
    device: str, env: dict[str, str] | None = None, arguments: tuple[str, ...] = ()
) -> Iterator[harness.Served]:
    """`craftai serve` with the SAM 2.1 fixture pinned as sam2-hiera-tiny (downloaded from
    loopback by its prepare service) and its torch route set up; `env` added to the server's,
    `arguments` to its command line (e.g. --gpus)."""
    from craftai_dev import sam21, segment

    fixture = sam21.ensure_fixture()
    with harness.scratch("bench-sam-") as work, harness.files_on_loopback(fixture.folder) as url:
        pins = {"sam2-hiera-tiny": segment.fixture_pins(fixture, url)}
        recipes = harness.pinned_catalogue(work / "recipes.toml", pins)
        full = {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": device, **(env or {})}
        with (
            harness.serve_process(work, full, arguments) as served,
            AiClient(app_id="bench", target=served.address) as ai,
        ):
            list(ai.setup("image.segment", "sam2-hiera-tiny", "torch"))
            yield served


def sam_torch_route(
    work: Path, device: str, precision: Precision = "auto", *, compile_grid: bool = False
) -> tuple[Any, Any]:
    """The SAM torch route built in this process from the folder a `sam_served` server prepared in
    its store under `work` (`Served.log.parent`), warmed up as the loader warms it, and its
    RouteFiles: to time the route beside the server, on the same files (`compile_grid`: as
    CRAFTAI_GPU_COMPILE, the service's default, builds it)."""
    from craftai_infer.routes import RouteFiles
    from craftai_infer.routes.sam2_torch import Sam2Torch
    from craftai_models.sam2.contract import WEIGHTS

    found = sorted(work.rglob(WEIGHTS))
    if not found:
        raise SystemExit(f"no {WEIGHTS} under {work}: was the torch route set up?")
    files = RouteFiles(
        by_role={},
        prepared=found[0].parent,
        cpu_threads=os.cpu_count() or 1,
        gpu_precision=precision,
        gpu_compile=compile_grid,
    )
    route = Sam2Torch(files, device)
    route.warm_up(lambda _message: None)
    return route, files


def sam_grpc(out: Path, device: str, tiny: bool) -> dict[str, Any]:
    size = (256, 192) if tiny else (2048, 1536)
    picture = harness.jpeg(size)
    with sam_served(device) as served, AiClient(app_id="bench", target=served.address) as ai:
        address = served.address
        started = time.perf_counter()
        session = ai.open_session(picture, "sam2-hiera-tiny", "torch")  # loads and warms the route
        first_open_ms = (time.perf_counter() - started) * 1000
        w, h = size
        # tiny: each measure once or twice (an encoder run takes seconds on a shared CPU)
        clicks = harness.timed_ms(lambda: session.segment([(w * 0.5, h * 0.45, True)]), *((2, 1) if tiny else (200, 5)))
        boxes = harness.timed_ms(
            lambda: session.segment(box=(w * 0.25, h * 0.2, w * 0.75, h * 0.8)), *((1, 0) if tiny else (100, 2))
        )
        # tiny: the first open's round trip (the route's load in it), an encoder run less
        opens = (
            [first_open_ms]
            if tiny
            else harness.timed_ms(lambda: ai.open_session(picture, "sam2-hiera-tiny", "torch").close(), 50, 2)
        )
        rates = {}
        for concurrency in (2,) if tiny else (1, 8, 32):  # tiny: the concurrent path only
            clients = [AiClient(app_id=f"bench-{i}", target=address) for i in range(concurrency)]
            try:
                rates[str(concurrency)] = throughput(
                    functools.partial(_open_and_close, clients, picture), concurrency, 0.0 if tiny else 8.0
                )
            finally:
                for client in clients:
                    client.close()
        runtime = ai.runtime()
        # the stages of a warm open (tiny: the first open's, which loaded the route: an encoder run less)
        opened = session if tiny else ai.open_session(picture, "sam2-hiera-tiny", "torch")
        click_stages = opened.segment([(w * 0.5, h * 0.45, True)]).timing_ms
        open_stages = opened.timing_ms
        opened.close()
    result = {
        "picture": f"{w}x{h} JPEG",
        "device": runtime.device,
        "click_round_trip_ms": harness.percentiles(clicks),
        "box_round_trip_ms": harness.percentiles(boxes),
        "picture_set_round_trip_ms": harness.percentiles(opens),
        "encoder_pictures_per_s": rates,
        "batches": {f"{r.route.recipe}/{r.route.engine}": [r.requests, r.batches] for r in runtime.loaded},
        "server_stages_ms": {"open_session": open_stages, "click": click_stages},
    }
    (out / "sam_grpc.json").write_text(json.dumps(result, indent=2))
    return result


def _open_and_close(clients: list[AiClient], picture: bytes, i: int) -> Callable[[], Any]:
    return lambda: clients[i].open_session(picture, "sam2-hiera-tiny", "torch").close()


# ---- matte ------------------------------------------------------------------------------------


def inspyrenet_checkpoint(folder: Path, made: Any = None) -> dict[str, Any]:
    """A random-weight checkpoint with the published key names, linked into `folder`: `made` (a
    craftai_dev.inspyrenet_fixture Checkpoint, e.g. the calibrated one), else the tests' own (seed
    7, made once and cached under .cache/fixtures by craftai_dev.inspyrenet_fixture)."""
    from craftai_dev.inspyrenet_fixture import checkpoints

    made = made or checkpoints()["random"]
    path = folder / "inspyrenet.safetensors"
    if not path.exists():
        try:
            os.link(made.path, path)
        except OSError:  # another file system
            import shutil

            shutil.copyfile(made.path, path)
    return {"size": made.pin.size, "sha256": made.pin.sha256}


def matte_grpc(out: Path, device: str, tiny: bool, checkpoint: Any = None) -> dict[str, Any]:
    """InSPyReNet through `craftai serve`: `checkpoint` (main passes the calibrated one, whose matte
    the refinement works on), else the uncalibrated random file."""
    with harness.scratch("bench-matte-") as work:
        files = work / "files"
        files.mkdir()
        pin = inspyrenet_checkpoint(files, checkpoint)
        sizes = [(61, 41)] if tiny else [(1280, 960), (4000, 3000)]
        result: dict[str, Any] = {}
        with harness.files_on_loopback(files) as url:
            weights = {**pin, "url": f"{url}/inspyrenet.safetensors"}
            recipes = harness.pinned_catalogue(work / "recipes.toml", {"inspyrenet-swinb": {"weights": weights}})
            with (
                harness.serve(work, {"CRAFTAI_RECIPES": str(recipes), "CRAFTAI_DEVICE": device}) as address,
                AiClient(app_id="bench", target=address) as ai,
            ):
                list(ai.setup("image.matte", "inspyrenet-swinb"))
                for size in sizes:
                    picture = harness.jpeg(size)
                    matte = functools.partial(ai.remove_background, picture, recipe="inspyrenet-swinb")
                    samples = harness.timed_ms(matte, *((1, 0) if tiny else (20, 2)))
                    server = ai.remove_background(picture, outputs="matte", recipe="inspyrenet-swinb")
                    result[f"{size[0]}x{size[1]}"] = {
                        "round_trip_ms": harness.percentiles(samples),
                        "server_stages_ms": server.timing_ms,
                        "device": server.device,
                    }
        (out / "matte_grpc.json").write_text(json.dumps(result, indent=2))
        return result


# ---- u2netp on the CPU against rembg ------------------------------------------------------------


def u2netp_cpu(out: Path, tiny: bool) -> dict[str, Any]:
    """rembg's `remove` (bytes in, PNG bytes out), the route in this process (decode, matte, PNG),
    `craftai serve` (the same through gRPC), a second server whose onnxruntime threads spin
    between runs (CRAFTAI_CPU_SPIN=1, onnxruntime's default) and, when `openvino` imports, a third
    serving the openvino engine (issue 19), interleaved in rounds: each round runs them in turn and
    the ratios are taken within the round, so a drifting load biases none of them."""
    import shutil
    from importlib.util import find_spec

    from craftai_dev.files import u2netp_onnx
    from craftai_dev.samples import photos

    names = ["chelsea.png"] if tiny else ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]
    pictures = [photos()[n].read_bytes() for n in names]
    rounds, calls = (1, 1) if tiny else (7, 4)
    with harness.scratch("bench-u2netp-") as work:
        (work / "files").mkdir()
        model = u2netp_onnx()
        shutil.copyfile(model, work / "files" / "u2netp.onnx")

        os.environ["U2NET_HOME"] = str(work / "files")
        # pymatting (alpha matting, never called here) compiles at import
        os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
        from rembg import new_session, remove

        session = new_session("u2netp")
        theirs_masks = [
            np.asarray(remove(Image.open(io.BytesIO(p)), session=session, only_mask=True)) for p in pictures
        ]

        def cycling(fn: Callable[[bytes], Any]) -> Callable[[int], Callable[[], Any]]:
            def make(i: int) -> Callable[[], Any]:
                counter = [i]

                def call() -> Any:
                    counter[0] += 1
                    return fn(pictures[counter[0] % len(pictures)])

                return call

            return make

        # The same route in this process, without the service around it (decode, matte, PNG): tells the
        # model's share from the service's.
        from craftai_infer import encodings
        from craftai_infer import pictures as decoding
        from craftai_infer.routes import RouteFiles
        from craftai_infer.routes.u2netp_onnx import U2netpOnnx

        route = U2netpOnnx(RouteFiles({"network": work / "files" / "u2netp.onnx"}, None, 0), "cpu")
        limits = decoding.Limits(50_000_000, 16384)

        def in_process(data: bytes) -> bytes:
            return encodings.png(route.matte([decoding.decode(data, limits)])[0], 1)

        result: dict[str, Any] = {"photos": names, "rounds": rounds, "calls_per_round": calls, "rembg": {}, "ours": {}}
        openvino = find_spec("openvino") is not None
        result["openvino"] = _version("openvino") if openvino else "not installed"
        served_openvino = harness.serve_u2netp_cpu(work / "openvino", model) if openvino else contextlib.nullcontext("")
        with harness.entered_together(
            harness.serve_u2netp_cpu(work, model),
            harness.serve_u2netp_cpu(work / "spinning", model, {"CRAFTAI_CPU_SPIN": "1"}),
            served_openvino,
        ) as (address, spinning_address, ov_address):
            clients = [AiClient(app_id=f"bench-{i}", target=address) for i in range(2)]
            spinning = [AiClient(app_id=f"bench-{i}", target=spinning_address) for i in range(2)]
            on_openvino = [AiClient(app_id=f"bench-{i}", target=ov_address) for i in range(2)] if openvino else []
            try:
                list(clients[0].setup("image.matte", "u2netp", "onnxruntime"))
                list(spinning[0].setup("image.matte", "u2netp", "onnxruntime"))

                def mattes(client: AiClient, engine: str | None) -> list[np.ndarray]:
                    answers = [
                        client.remove_background(p, outputs="matte", recipe="u2netp", engine=engine) for p in pictures
                    ]
                    return [np.asarray(Image.open(io.BytesIO(a.matte_png))) for a in answers]

                ours_masks = mattes(clients[0], None)
                if openvino:
                    list(on_openvino[0].setup("image.matte", "u2netp", "openvino"))
                    openvino_masks = mattes(on_openvino[0], "openvino")

                def through(served: list[AiClient], engine: str | None = None) -> Callable[[int], Callable[[], Any]]:
                    def make(i: int) -> Callable[[], Any]:
                        client = served[i]
                        return cycling(
                            lambda data: client.remove_background(data, outputs="matte", recipe="u2netp", engine=engine)
                        )(i)

                    return make

                for concurrency in (2,) if tiny else (1, 2):  # tiny: the concurrent path only, as sam_grpc's
                    measured = harness.interleaved(
                        {
                            "rembg": cycling(lambda data: remove(data, session=session, only_mask=True)),
                            "in_process": cycling(in_process),
                            "ours": through(clients),
                            "ours_spinning": through(spinning),
                            **({"ours_openvino": through(on_openvino, "openvino")} if openvino else {}),
                        },
                        "rembg",
                        rounds=rounds,
                        calls=calls * concurrency,
                        concurrency=concurrency,
                    )
                    c = str(concurrency)
                    result["rembg"][c] = measured.median_rate("rembg")
                    result["ours"][c] = measured.median_rate("ours")
                    result[f"ours_in_process_{c}"] = measured.median_rate("in_process")
                    result.setdefault("ratio", {})[c] = measured.median_ratio("ours")
                    result.setdefault("ratio_in_process", {})[c] = measured.median_ratio("in_process")
                    result.setdefault("ratio_spinning", {})[c] = measured.median_ratio("ours_spinning")
                    result.setdefault("service_over_in_process", {})[c] = statistics.median(
                        a / b for a, b in zip(measured.rates["ours"], measured.rates["in_process"], strict=True)
                    )
                    result.setdefault("rounds_ratios", {})[c] = measured.ratios("ours")
                    result.setdefault("rates", {})[c] = measured.rates
                    if openvino:
                        result.setdefault("ours_openvino", {})[c] = measured.median_rate("ours_openvino")
                        result.setdefault("ratio_openvino", {})[c] = measured.median_ratio("ours_openvino")
                        result.setdefault("rounds_ratios_openvino", {})[c] = measured.ratios("ours_openvino")
                        result.setdefault("openvino_over_ours", {})[c] = statistics.median(
                            a / b for a, b in zip(measured.rates["ours_openvino"], measured.rates["ours"], strict=True)
                        )
            finally:
                for client in clients + spinning + on_openvino:
                    client.close()
    result.update(_matte_agreement(ours_masks, theirs_masks))
    if openvino:
        result.update({f"{k}_openvino": v for k, v in _matte_agreement(openvino_masks, theirs_masks).items()})
    result["load_average"] = os.getloadavg()
    (out / "u2netp_cpu.json").write_text(json.dumps(result, indent=2))
    return result


def _matte_agreement(ours: list[np.ndarray], theirs: list[np.ndarray]) -> dict[str, Any]:
    """Mattes against rembg's, photo by photo: identical?, the largest difference, the smallest IoU
    of the >0.5 masks (uint8 > 127)."""
    pairs = list(zip(ours, theirs, strict=True))
    return {
        "same_output": all(np.array_equal(a, b) for a, b in pairs),
        "max_abs_diff": max(int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in pairs),
        "min_iou": min(_iou(a > 127, b > 127) for a, b in pairs),
    }


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


# ---- report ------------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    lines = [
        f"craft-ai bench, {results['machine']['date']}, {results['machine']['gpu'] or 'no GPU'}, "
        f"{results['machine']['cpus']} CPUs",
        "",
    ]
    if "sam_inprocess" in results:
        lines += [
            "### SAM 2.1 tiny in-process",
            "",
            (REPO / "out" / "bench" / "sam_gpu.md").read_text()
            if (REPO / "out" / "bench" / "sam_gpu.md").exists()
            else json.dumps(results["sam_inprocess"]),
        ]
    if "sam_grpc" in results:
        r = results["sam_grpc"]
        lines += [
            f"### SAM 2.1 tiny through gRPC on loopback ({r['picture']}, device {r['device']})",
            "",
            "| measure | p50 ms | p90 ms | p99 ms |",
            "|---|---|---|---|",
            *(
                f"| {name} | {r[key]['p50']:.2f} | {r[key]['p90']:.2f} | {r[key]['p99']:.2f} |"
                for name, key in (
                    ("click round trip (best mask PNG)", "click_round_trip_ms"),
                    ("box round trip (best mask PNG)", "box_round_trip_ms"),
                    ("picture set (OpenSession round trip)", "picture_set_round_trip_ms"),
                )
            ),
            "",
            "| concurrency | encoder throughput, pictures/s |",
            "|---|---|",
            *(f"| {c} | {v:.1f} |" for c, v in r["encoder_pictures_per_s"].items()),
            "",
            f"requests/model calls per route: {r['batches']}",
            "",
        ]
    if "matte_grpc" in results:
        lines += [
            "### InSPyReNet through gRPC",
            "",
            "| picture | round trip p50 ms | server stages ms |",
            "|---|---|---|",
        ]
        lines += [
            f"| {k} | {v['round_trip_ms']['p50']:.1f} | "
            + ", ".join(f"{s} {ms:.1f}" for s, ms in v["server_stages_ms"].items())
            + " |"
            for k, v in results["matte_grpc"].items()
        ]
        lines.append("")
    if "matte_outputs" in results:
        from tools.bench import matte_outputs

        lines += [matte_outputs.gpu_report(results["matte_outputs"])]
    if "u2netp_cpu" in results:
        r = results["u2netp_cpu"]
        lines += [
            "### u2netp on the CPU against rembg (pictures/s)",
            "",
            "| clients | rembg | ours | ratio | the route in this process | its ratio | service / in-process "
            "| ratio, onnxruntime threads spinning |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {c} | {r['rembg'][c]:.2f} | {r['ours'][c]:.2f} | {r['ratio'][c]:.2f} | "
                f"{r['ours_in_process_' + c]:.2f} | {r['ratio_in_process'][c]:.2f} | "
                f"{r['service_over_in_process'][c]:.2f} | {r['ratio_spinning'][c]:.2f} |"
                for c in r["ours"]
            ),
            "",
            f"medians of {r['rounds']} interleaved rounds of {r['calls_per_round']} calls per client; a ratio is "
            "the median of the rounds' ratios",
            f"same matte as rembg on every photo: {r['same_output']} (max diff {r['max_abs_diff']}/255, "
            f"smallest IoU of the >0.5 masks {r['min_iou']:.4f}); load average {r['load_average'][0]:.1f}",
            "",
        ]
        if "ours_openvino" in r:
            lines += [
                f"#### the openvino engine (OpenVINO {r['openvino']}, f32) through `craftai serve`, same rounds",
                "",
                "| clients | rembg | ours (onnxruntime) | ours (openvino) | openvino / rembg | onnxruntime / rembg "
                "| openvino / onnxruntime |",
                "|---|---|---|---|---|---|---|",
                *(
                    f"| {c} | {r['rembg'][c]:.2f} | {r['ours'][c]:.2f} | {r['ours_openvino'][c]:.2f} | "
                    f"{r['ratio_openvino'][c]:.2f} (rounds {min(r['rounds_ratios_openvino'][c]):.2f}-"
                    f"{max(r['rounds_ratios_openvino'][c]):.2f}) | {r['ratio'][c]:.2f} | "
                    f"{r['openvino_over_ours'][c]:.2f} |"
                    for c in r["ours_openvino"]
                ),
                "",
                f"openvino's matte against rembg's: identical {r['same_output_openvino']}, max diff "
                f"{r['max_abs_diff_openvino']}/255, smallest IoU of the >0.5 masks {r['min_iou_openvino']:.6f}",
                "",
            ]
        else:
            lines += [f"the openvino engine: {r.get('openvino', 'not measured')}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--device", default="auto", help="auto (the GPU when one answers) or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and counts: checks that everything runs")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() and options.device != "cpu" else ""
    torch_device = "cuda" if gpu else "cpu"
    results: dict[str, Any] = {
        "machine": {
            "date": datetime.date.today().isoformat(),
            "gpu": gpu,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        }
    }
    for section in options.sections.split(","):
        started = time.monotonic()
        print(f"== {section}", flush=True)
        if section == "sam_inprocess":
            from tools.bench import sam_gpu

            # fp16 on the CPU only costs time: the tiny run checks fp32 (the GPU run checks both)
            variants = "fp32" if options.tiny else "fp32,fp16"
            args = ["--device", torch_device, "--out", str(options.out), "--variants", variants]
            sam_gpu.main(args + (["--reps", "1", "--warmup", "0", "--picture", "256x192"] if options.tiny else []))
            results[section] = json.loads((options.out / "sam_gpu.json").read_text())
        elif section == "sam_grpc":
            results[section] = sam_grpc(options.out, options.device, options.tiny)
        elif section == "matte_inprocess":
            from tools.bench import matte_gpu

            args = ["--device", torch_device, "--out", str(options.out)]
            # fp32 only on the tiny CPU run, as for SAM: CPU autocast to fp16/bf16 cost over a minute
            tiny = ["--reps", "1", "--warmup", "0", "--sizes", "64", "--pictures", "80x60", "--dtypes", "fp32"]
            # the pipeline's rows with the calibrated checkpoint: the refinement does its real work
            matte_gpu.main(args + (tiny if options.tiny else ["--calibrated", "1280"]))
            results[section] = json.loads((options.out / "matte_gpu.json").read_text())
        elif section == "matte_grpc":
            checkpoint = None
            if not options.tiny:
                from craftai_dev.inspyrenet_fixture import calibrated

                checkpoint = calibrated(1280, torch_device)
            results[section] = matte_grpc(options.out, options.device, options.tiny, checkpoint)
        elif section == "matte_outputs":
            from tools.bench import matte_outputs

            results[section] = matte_outputs.gpu(options.out, options.device, options.tiny)
        elif section == "u2netp_cpu":
            results[section] = u2netp_cpu(options.out, options.tiny)
        else:
            raise SystemExit(f"unknown section {section!r}; sections: {', '.join(SECTIONS)}")
        print(f"   {section} in {time.monotonic() - started:.0f} s", flush=True)
    harness.write_report(options.out, "bench", results, report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
