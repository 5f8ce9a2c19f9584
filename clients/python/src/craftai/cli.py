"""The `craftai` command: serve, status, setup, remove-background, segment.

craftai serve                                  # all three services on 127.0.0.1:50051
craftai setup image.matte --recipe u2netp      # download and verify (progress bars)
craftai remove-background a.jpg photos/ -o out/ --outputs cutout,composite --bg-color '#2a6df4'   # files, folders, -
craftai segment photo.jpg --point 310,200 --point 40,40:bg -o mask.png   # a mask from clicks and/or a box
craftai segment photo.jpg --box 10,10,200,150 --box 220,40,400,300 -o masks.json --format rle  # two objects
craftai segment-all photo.jpg -o masks.json    # every object (Meta's automatic mask generator), COCO RLE
craftai keys add my-editor                     # a new key for an app: its hash into the keys file
craftai serve --web                            # the services, and the page and HTTP API on 127.0.0.1:8080
craftai web --address 10.0.0.7:50051           # the page and HTTP API in front of services elsewhere
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from tqdm import tqdm

from craftai import calls
from craftai.client import AiClient, MaskFormat, MaskOutput, Point, Prompt
from craftai.errors import CraftAiError
from craftai.installation import Notice, Progress, SetupOutput
from craftai.outputs import SUFFIXES
from craftai_wire import keys, vocabulary
from craftai_wire.metadata import APP_ID_PATTERN
from craftai_wire.vocabulary import Engine, ImageFormat, Output, Reason

if TYPE_CHECKING:
    from craftai.web.settings import WebSettings

# --engine's choices: the engines the wire knows (a recipe offers some of them, and the services
# answer UNKNOWN_ENGINE for one it does not).
ENGINES = tuple(Engine)


def _client(options: argparse.Namespace) -> AiClient:
    return AiClient(app_id=options.app_id, target=options.address)


def _web_settings(options: argparse.Namespace) -> WebSettings:
    try:
        from craftai.web.settings import WebSettings
    except ImportError as exc:
        raise SystemExit(f"craftai: the web gateway needs its extra (pip install 'craftai[web]'): {exc}") from exc
    given = {"host": options.web_host, "port": options.web_port, "target": getattr(options, "address", None)}
    return WebSettings(**{k: v for k, v in given.items() if v is not None})


def cmd_serve(options: argparse.Namespace) -> int:
    from craftai import serve

    web = _web_settings(options) if options.web else None
    if web is not None:
        web = web.model_copy(update={"target": None})  # the services of this process
    return serve.run(options.host, options.port, options.store, web)


def cmd_web(options: argparse.Namespace) -> int:
    from craftai.web import server

    return server.run(_web_settings(options))


def cmd_status(options: argparse.Namespace) -> int:
    with _client(options) as ai:
        runtime = ai.runtime()
        gpu = f"GPU: {runtime.gpu_name}" if runtime.gpu_available else "no GPU"
        print(f"infer device: {runtime.device} ({gpu}); engines: {', '.join(runtime.engines)}")
        rows = [
            (f"{r.route.feature}", r.route.recipe, r.route.engine, r.state or "?", r.detail)
            for r in ai.status(options.feature or "")
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)] if rows else [0] * 4
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    return 0


def cmd_setup(options: argparse.Namespace) -> int:
    bars: dict[str, tqdm] = {}  # type: ignore[type-arg]
    result: SetupOutput | None = None
    started = time.perf_counter()
    with _client(options) as ai:
        try:
            for event in ai.setup(options.feature, options.recipe, options.engine):
                if isinstance(event, Progress):
                    bar = bars.get(event.stage)
                    if bar is None:
                        unit_scale = event.unit == "bytes"
                        bar = tqdm(
                            total=event.total or None,
                            unit="B" if unit_scale else "it",
                            unit_scale=unit_scale,
                            unit_divisor=1024,
                            desc=event.stage,
                            leave=True,
                            disable=options.quiet,
                        )
                        bars[event.stage] = bar
                    if event.total and bar.total != event.total:
                        bar.reset(total=event.total)
                    bar.n = event.done
                    bar.set_postfix_str(event.message[-60:], refresh=True)
                elif isinstance(event, Notice):
                    tqdm.write(f"note: {event.message}")
                else:
                    result = event
        finally:
            for bar in bars.values():
                bar.close()
    assert result is not None
    r = result.route
    what = "already set up (files checked)" if result.already_done else "set up"
    if result.revision:
        what += f", prepared revision {result.revision}" + (" (prepared now)" if result.prepared_now else "")
    print(f"{r.feature} {r.recipe} ({r.engine}): {what} in {time.perf_counter() - started:.1f} s")
    for f in result.files:
        print(f"  {f.folder}/{f.name}  {f.size:,} bytes  sha256 {f.sha256[:16]}…  from {f.source}")
    return 0


PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".ppm", ".pgm")
STDIO = "-"
FORMAT_OF_SUFFIX: dict[str, ImageFormat] = {
    **{suffix: fmt for fmt, suffix in SUFFIXES.items()},
    ".jpeg": ImageFormat.JPEG,
}
# The per-app limit and the decode memory budget answer RESOURCE_EXHAUSTED with RetryInfo: wait, try again.
TOO_MANY_REQUESTS_TRIES = 20
BUSY_REASONS = (Reason.TOO_MANY_REQUESTS, Reason.MEMORY_BUDGET)


@dataclass(frozen=True)
class Picture:
    """One picture to do: where it comes from, and where each of its outputs goes."""

    label: str  # how the summary names it
    source: Path | None  # None: standard input
    targets: dict[str, Path | None]  # output name -> path; None: standard output


@dataclass
class Done:
    picture: Picture
    written: list[Path | None] = field(default_factory=list)
    line: str = ""
    notices: list[str] = field(default_factory=list)
    error: str = ""


class RunError(Exception):
    """A failure no other picture can escape (the server, the route, the app's key): the run stops."""


def _walk(folder: Path, skip: Path | None) -> list[Path]:
    """The pictures under a folder, recursively, in name order; hidden names and `skip` (the output
    folder, when it lies inside) left out."""
    found = []
    for root, folders, files in os.walk(folder):
        here = Path(root)
        folders[:] = sorted(
            f for f in folders if not f.startswith(".") and (skip is None or (here / f).resolve() != skip)
        )
        found += [here / f for f in sorted(files) if not f.startswith(".") and f.lower().endswith(PICTURE_SUFFIXES)]
    return found


def plan(inputs: list[str], output: str, names: Sequence[str], formats: Mapping[str, str]) -> list[Picture]:
    """Where every output of every picture goes (usage mistakes raise ValueError).

    Files and `-` (standard input) go straight under OUT; a folder's pictures go under OUT at their
    path inside it (the same tree). Each output is <name>.<output>.<suffix>; pictures whose names
    differ only by their suffix (a.jpg, a.png) keep it (a.jpg.matte.png). OUT may be a file name
    (.png, .webp, .jpg) for one picture: the first output goes there, the others beside it
    (photo.cutout.png), or `-` (standard output) for one picture and one output.
    """
    out = Path(output)
    skip = out.resolve() if output != STDIO else None
    found: list[tuple[str, Path | None, Path]] = []  # label, source, place under OUT (without suffixes)
    seen: set[Path] = set()
    for given in inputs:
        if given == STDIO:
            found.append(("standard input", None, Path("stdin")))
            continue
        path = Path(given)
        if path.is_dir():
            for picture in _walk(path, skip):
                if picture.resolve() not in seen:
                    seen.add(picture.resolve())
                    found.append((str(picture), picture, picture.relative_to(path)))
        elif path.resolve() not in seen:  # a missing file is kept: it fails as a picture, in plain words
            seen.add(path.resolve())
            found.append((str(path), path, Path(path.name)))
    suffix = {name: SUFFIXES[ImageFormat(formats.get(name, ImageFormat.PNG))] for name in names}
    to_stdout = output == STDIO
    single_file = not to_stdout and out.suffix.lower() in FORMAT_OF_SUFFIX
    if (to_stdout or single_file) and len(found) != 1:
        raise ValueError(f"{output} is one file, but there are {len(found)} pictures: give a folder (-o OUT/)")
    if to_stdout and len(names) != 1:
        raise ValueError(f"standard output holds one output, and {len(names)} are asked: give --outputs with one")
    stems: dict[Path, int] = {}
    for _, _, place in found:
        key = place.with_suffix("")
        stems[key] = stems.get(key, 0) + 1
    pictures = []
    for label, source, place in found:
        if to_stdout:
            targets: dict[str, Path | None] = {names[0]: None}
        elif single_file:
            first, *others = names
            targets = {first: out, **{n: out.with_name(f"{out.stem}.{n}{suffix[n]}") for n in others}}
        else:
            base = place.name if stems[place.with_suffix("")] > 1 else place.stem
            targets = {n: out / place.parent / f"{base}.{n}{suffix[n]}" for n in names}
        pictures.append(Picture(label, source, targets))
    return pictures


def _write(target: Path | None, data: bytes) -> None:
    """The file appears whole or not at all (a partial file would count as done next time)."""
    if target is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        part.write_bytes(data)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


def _run_error(error: CraftAiError) -> bool:
    """Errors that no other picture would escape: stop the run rather than fail every picture."""
    if error.code == grpc.StatusCode.INVALID_ARGUMENT:
        return any(f.startswith("background") for f, _ in error.violations)
    return error.code not in (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
    )


def _one(ai: AiClient, picture: Picture, asked: dict[str, Any], stdin: bytes, overwrite: bool) -> Done:
    """One picture: the outputs not written yet asked in one request, then written."""
    done = Done(picture)
    missing = [n for n, t in picture.targets.items() if overwrite or t is None or not t.exists()]
    if not missing:
        return done  # skipped: every output is there
    options = dict(asked)
    if Output.COMPOSITE not in missing:
        options.update(bg_color=None, bg_blur=None, bg_image=None)
    if Output.MASK not in missing:
        options["threshold"] = None
    started = time.perf_counter()
    try:
        data = stdin if picture.source is None else picture.source.read_bytes()
        for attempt in range(TOO_MANY_REQUESTS_TRIES):
            try:
                result = ai.remove_background(data, outputs=missing, **options)
                break
            except CraftAiError as error:
                if error.reason not in BUSY_REASONS or attempt == TOO_MANY_REQUESTS_TRIES - 1:
                    raise
                time.sleep(error.retry_after or 1.0)
    except OSError as error:
        done.error = f"cannot read it ({error.strerror or error})"
        return done
    except CraftAiError as error:
        if _run_error(error):
            raise RunError(error.message) from error
        done.error = error.message
        return done
    round_trip = (time.perf_counter() - started) * 1000
    images = result.images
    for name in missing:
        _write(picture.targets[name], images[Output(name)].data)
        done.written.append(picture.targets[name])
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    where = ", ".join(str(t) if t is not None else "standard output" for t in done.written)
    done.line = (
        f"{picture.source.name if picture.source else 'standard input'}: {result.width}x{result.height} "
        f"{result.recipe}/{result.engine} on {result.device}: {round_trip:.0f} ms round trip "
        f"(server {result.server_ms:.0f} ms: {stages}) -> {where}"
    )
    done.notices = result.notices
    return done


def default_jobs(ai: AiClient) -> int:
    """Pictures in flight at once, sized to the server: a GPU batches up to 8 pictures per forward
    (CRAFTAI_MAX_BATCH) while the CPU pool decodes and encodes others; on a CPU the matte routes run
    two at a time, and one more picture is decoded or encoded meanwhile."""
    try:
        runtime = ai.runtime()
    except CraftAiError:
        return 2
    return 8 if runtime.gpu_available else 3


def _names(options: argparse.Namespace) -> list[Output]:
    if options.outputs is not None:
        if options.cutout is not None:
            raise ValueError("give either --outputs or --cutout/--no-cutout")
        return [Output(name) for name in calls.matte_options(outputs=options.outputs).outputs]
    names = [Output.MATTE]
    names += [Output.CUTOUT] if options.cutout in (None, True) else []
    names += [Output.COMPOSITE] if (options.bg_color or options.bg_blur or options.bg_image) else []
    names += [Output.MASK] if options.threshold is not None else []
    return names


def cmd_remove_background(options: argparse.Namespace) -> int:
    started = time.perf_counter()
    to_stdout = options.output == STDIO
    say = sys.stderr if to_stdout else sys.stdout
    try:
        names = _names(options)
        fmt = options.format
        if fmt is None and not to_stdout:
            fmt = FORMAT_OF_SUFFIX.get(Path(options.output).suffix.lower())
        if (
            fmt == ImageFormat.JPEG
            and names[0] != Output.COMPOSITE
            and Path(options.output).suffix.lower() in (".jpg", ".jpeg")
        ):
            raise ValueError(f"{options.output} is a JPEG file, which can hold only the composite: --outputs composite")
        bg_image = Path(options.bg_image).read_bytes() if options.bg_image else None
        asked = {
            "naive": options.naive,
            "bg_color": options.bg_color,
            "bg_blur": options.bg_blur,
            "bg_image": bg_image,
            "threshold": options.threshold,
            "format": fmt,
            "png_level": options.png_level,
            "jpeg_quality": options.jpeg_quality,
            "recipe": options.recipe,
            "engine": options.engine,
        }
        checked = calls.matte_options(
            outputs=names, **{k: v for k, v in asked.items() if k not in ("recipe", "engine")}
        )
        pictures = plan(options.inputs, options.output, names, checked.formats)
    except (ValueError, OSError) as error:
        print(f"craftai: {error}", file=sys.stderr)
        return 2
    stdin = sys.stdin.buffer.read() if any(p.source is None for p in pictures) else b""
    results: list[Done] = []
    stopped = ""
    with _client(options) as ai:
        jobs = max(1, min(options.jobs or default_jobs(ai), len(pictures) or 1))
        bar = tqdm(
            total=len(pictures), desc="pictures", unit="pic", disable=options.quiet or len(pictures) < 2, leave=False
        )
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="picture") as pool:
            running = {pool.submit(_one, ai, p, asked, stdin, options.overwrite): p for p in pictures}
            try:
                for future in as_completed(running):
                    try:
                        done = future.result()
                    except RunError as error:
                        stopped = str(error)
                        for other in running:
                            other.cancel()
                        break
                    results.append(done)
                    bar.update(1)
                    if done.line:
                        tqdm.write(done.line, file=say)
                    for notice in done.notices:
                        tqdm.write(f"  note: {notice}", file=say)
            except KeyboardInterrupt:
                for other in running:
                    other.cancel()
                raise
            finally:
                bar.close()
    order = {p.label: i for i, p in enumerate(pictures)}
    failed = sorted((d for d in results if d.error), key=lambda d: order[d.picture.label])
    written = sum(1 for d in results if d.written)
    skipped = sum(1 for d in results if not d.written and not d.error)
    elapsed = time.perf_counter() - started
    print(
        f"{len(pictures)} picture(s) in {elapsed:.2f} s: {written} done, {skipped} skipped "
        f"(their outputs exist; --overwrite to redo them), {len(failed)} failed",
        file=say,
    )
    for d in failed:
        print(
            f"craftai: {d.error}" if len(pictures) == 1 else f"craftai: {d.picture.label}: {d.error}", file=sys.stderr
        )
    if stopped:
        left = len(pictures) - len(results)
        print(f"craftai: {stopped} (stopped with {left} picture(s) not done)", file=sys.stderr)
    return 1 if failed or stopped else 0


def _point(text: str) -> Point:
    """`x,y` (foreground), `x,y:fg` or `x,y:bg`, in picture pixels."""
    where, _, kind = text.partition(":")
    kind = kind.strip().lower() or "fg"
    if kind not in ("fg", "bg"):
        raise argparse.ArgumentTypeError(f"{text!r}: a point is x,y or x,y:fg or x,y:bg")
    try:
        x, y = (float(v) for v in where.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a point is x,y or x,y:fg or x,y:bg (numbers)") from None
    return Point(x, y, foreground=kind == "fg")


def _box(text: str) -> tuple[float, float, float, float]:
    try:
        x0, y0, x1, y1 = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a box is x0,y0,x1,y1 (top-left, bottom-right)") from None
    return (x0, y0, x1, y1)


class _Bar:
    """One progress bar for a segmentation call: its stages, then the decoder's points."""

    def __init__(self, desc: str, quiet: bool) -> None:
        self.bar = tqdm(total=None, desc=desc, leave=False, disable=quiet)

    def __call__(self, event: Progress) -> None:
        if event.total and self.bar.total != event.total:
            self.bar.reset(total=event.total)
        self.bar.n = event.done
        self.bar.set_postfix_str(f"{event.stage}: {event.message}"[-70:], refresh=True)

    def close(self) -> None:
        self.bar.close()


def _record(mask: MaskOutput, *, everything: bool = False) -> dict[str, object]:
    """A mask as a COCO / SA-1B style annotation: COCO RLE (or polygons), area, bbox [x, y, w, h]."""
    x0, y0, x1, y1 = mask.box
    record: dict[str, object] = {
        "area": mask.area,
        "bbox": [x0, y0, x1 - x0, y1 - y0],
        "predicted_iou": round(mask.predicted_iou, 6),
    }
    if mask.rle is not None:
        record["segmentation"] = mask.rle.to_coco()
    if mask.polygons:
        rings = [[v for xy in p.outer for v in xy] for p in mask.polygons]
        record.setdefault("segmentation", rings)
        record["polygons"] = [
            {"outer": [v for xy in p.outer for v in xy], "holes": [[v for xy in h for v in xy] for h in p.holes]}
            for p in mask.polygons
        ]
    if everything:
        record["stability_score"] = round(mask.stability_score, 6)
        if mask.point is not None:
            record["point_coords"] = [[mask.point.x, mask.point.y]]
    else:
        record["prompt"] = mask.prompt_index
    return record


def _write_json(out: Path, picture: Path, width: int, height: int, records: list[dict[str, object]]) -> None:
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    document = {"image": {"file_name": picture.name, "width": width, "height": height}, "annotations": records}
    out.write_text(json.dumps(document, indent=1) + "\n")


def cmd_segment(options: argparse.Namespace) -> int:
    if not options.point and not options.box:
        print("craftai: give at least one --point or a --box", file=sys.stderr)
        return 2
    if len(options.box) > 1 and options.point:
        print(
            "craftai: several --box are several objects, one box each; clicks go with a single --box",
            file=sys.stderr,
        )
        return 2
    several = [Prompt(box=b) for b in options.box] if len(options.box) > 1 else None
    out = Path(options.output)
    bar = _Bar("segment", options.quiet)
    started = time.perf_counter()
    with _client(options) as ai:
        try:
            result = ai.segment_once(
                Path(options.input),
                points=[] if several else options.point,
                box=None if several else (options.box[0] if options.box else None),
                all_masks=options.all_masks,
                prompts=several,
                formats=options.format,
                polygon_tolerance=options.polygon_tolerance,
                single_mask_like_meta=options.like_meta,
                recipe=options.recipe,
                engine=options.engine,
                on_progress=bar,
            )
        finally:
            bar.close()
    round_trip = (time.perf_counter() - started) * 1000
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    if options.format == vocabulary.MaskFormat.PNG:
        objects = result.objects
        stem, suffix = out.stem, out.suffix or ".png"
        for index, masks in enumerate(objects):
            for k, mask in enumerate(masks):
                name = stem + (f"-{index}" if len(objects) > 1 else "") + (f"-{k}" if options.all_masks else "")
                path = out.with_name(name + suffix) if len(result.masks) > 1 else out
                path.write_bytes(mask.png)
                what = "empty (nothing selected)" if mask.empty else f"{mask.selected_fraction:.1%} of the picture"
                print(f"{path}: predicted IoU {mask.predicted_iou:.3f}, {what}")
    else:
        _write_json(out, Path(options.input), result.width, result.height, [_record(m) for m in result.masks])
        print(f"{out}: {len(result.masks)} mask(s) as {options.format}")
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    print(
        f"{Path(options.input).name}: {result.width}x{result.height} {result.recipe}/{result.engine} on "
        f"{result.device}: {round_trip:.0f} ms round trip (server {result.server_ms:.0f} ms: {stages})"
    )
    for notice in result.notices:
        print(f"  note: {notice}")
    return 0


EVERYTHING_FLAGS = (
    ("points_per_side", int),
    ("points_per_batch", int),
    ("pred_iou_thresh", float),
    ("stability_score_thresh", float),
    ("stability_score_offset", float),
    ("box_nms_thresh", float),
    ("min_mask_region_area", int),
)


def cmd_segment_all(options: argparse.Namespace) -> int:
    out = Path(options.output)
    picture = Path(options.input)
    chosen: dict[str, Any] = {
        name: getattr(options, name) for name, _ in EVERYTHING_FLAGS if getattr(options, name) is not None
    }
    if options.single_mask:
        chosen["multimask_output"] = False
    png = options.format == vocabulary.MaskFormat.PNG
    formats: list[MaskFormat] = [vocabulary.MaskFormat.RLE, vocabulary.MaskFormat.PNG] if png else [options.format]
    bar = _Bar("segment-all", options.quiet)
    started = time.perf_counter()
    with _client(options) as ai:
        try:
            with ai.open_session(picture, options.recipe, options.engine, on_progress=bar) as session:
                result = session.segment_everything(
                    formats=formats, polygon_tolerance=options.polygon_tolerance, on_progress=bar, **chosen
                )
        finally:
            bar.close()
    round_trip = (time.perf_counter() - started) * 1000
    records = [_record(m, everything=True) for m in result.masks]
    if options.format == vocabulary.MaskFormat.PNG:
        for k, (mask, record) in enumerate(zip(result.masks, records, strict=True)):
            path = out.with_name(f"{out.stem}-{k:03d}.png")
            if out.parent != Path(""):
                out.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(mask.png)
            record["png"] = path.name
    _write_json(out, picture, result.width, result.height, records)
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    print(
        f"{out}: {len(result.masks)} masks from {result.points} points ({result.candidates} passed the filters); "
        f"{picture.name} {result.width}x{result.height} {result.recipe}/{result.engine} on {result.device}: "
        f"{round_trip / 1000:.1f} s round trip (server {result.server_ms:.0f} ms: {stages})"
    )
    for notice in result.notices:
        print(f"  note: {notice}")
    return 0


def cmd_keys_add(options: argparse.Namespace) -> int:
    """A new key for an app: its hash is added to the keys file, the key is printed once."""
    if options.app != keys.WILDCARD and not APP_ID_PATTERN.match(options.app):
        print(
            "craftai: an app id is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            file=sys.stderr,
        )
        return 2
    chosen = options.keys_file or os.environ.get("CRAFTAI_KEYS_FILE")
    path = Path(chosen) if chosen else keys.default_keys_file()
    key = keys.new_key()
    keys.add_key_line(path, keys.key_line(options.app, key))  # whole, atomically; servers re-read it within 1 s
    print(key)
    print(
        f"added a key for {options.app} to {path} (only its hash is kept there); give the key above to the app "
        "(CRAFTAI_APP_KEY or AiClient(app_key=...)): it is not shown again",
        file=sys.stderr,
    )
    return 0


def cmd_keys_hash(options: argparse.Namespace) -> int:
    """The keys-file line for a key read on standard input (for secrets made elsewhere)."""
    key = sys.stdin.readline().strip()
    if not key:
        print("craftai: give the key on standard input", file=sys.stderr)
        return 2
    print(keys.key_line(options.app, key), end="")
    return 0


def _format_flags(s: argparse.ArgumentParser, default: str) -> None:
    s.add_argument(
        "--format",
        choices=list(vocabulary.MaskFormat),
        default=default,
        help=f"how the masks are written (default {default}); rle: COCO run-length encoding",
    )
    s.add_argument(
        "--polygon-tolerance", type=float, default=None, metavar="PIXELS", help="polygons: simplification (default 1)"
    )


def _web_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument("--web-host", default=None, help="the gateway's address (default CRAFTAI_WEB_HOST or 127.0.0.1)")
    s.add_argument("--web-port", type=int, default=None, help="its port (default CRAFTAI_WEB_PORT or 8080)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="craftai", description="craft-ai services: local AI image features")
    p.add_argument(
        "--address",
        default=os.environ.get("CRAFTAI_ADDRESS"),
        help="server address (default: CRAFTAI_ADDRESS or 127.0.0.1:50051)",
    )
    p.add_argument(
        "--app-id",
        default=os.environ.get("CRAFTAI_APP_ID", "craftai-cli"),
        help="the app id sent with every request (default: CRAFTAI_APP_ID or craftai-cli)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the three services on one port (the embedded default)")
    s.add_argument("--host", default=None, help="address to listen on (default CRAFTAI_HOST or 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default CRAFTAI_PORT or 50051)")
    s.add_argument("--store", type=Path, default=None, help="model store folder (default CRAFTAI_STORE)")
    s.add_argument("--web", action="store_true", help="also serve the HTTP API and the page (craftai[web])")
    _web_flags(s)
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("web", help="the HTTP API and the page, in front of the services at --address")
    _web_flags(s)
    s.set_defaults(func=cmd_web)

    s = sub.add_parser("status", help="the infer device and the state of every route")
    s.add_argument("feature", nargs="?", default="")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("setup", help="download, verify and prepare a feature's route")
    s.add_argument("feature", help="image.matte or image.segment")
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=ENGINES)
    s.set_defaults(func=cmd_setup)

    s = sub.add_parser(
        "remove-background",
        help="write the matte, cutout, composite and/or mask of pictures (files, folders, -)",
        description="Remove the background of pictures: files, folders (recursively, the same tree under OUT) "
        "and - (standard input). Pictures whose outputs exist are skipped unless --overwrite; a failed picture "
        "never stops the others, and the exit code is 1 when any failed.",
    )
    s.add_argument(
        "inputs", nargs="+", metavar="IN", help="PNG, JPEG, WebP or binary PPM pictures, folders of them, or -"
    )
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="a folder; or a file (.png, .webp, .jpg) for one picture: the first output there, the others beside it; "
        "or - (standard output) for one picture and one output",
    )
    s.add_argument(
        "--outputs",
        default=None,
        metavar="LIST",
        help="any of matte,cutout,composite,mask (default: matte,cutout, plus composite with a background "
        "and mask with a threshold)",
    )
    s.add_argument(
        "--cutout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with the default outputs: the cutout too (default: yes)",
    )
    s.add_argument(
        "--naive",
        action="store_true",
        help="cutout and composite keep the picture's own colours (no foreground colour estimation)",
    )
    bg = s.add_mutually_exclusive_group()
    bg.add_argument(
        "--bg-color", default=None, metavar="COLOR", help="composite over a colour: #rrggbb[aa] or r,g,b[,a]"
    )
    bg.add_argument(
        "--bg-blur", type=float, default=None, metavar="RADIUS", help="composite over the picture blurred (pixels)"
    )
    bg.add_argument("--bg-image", default=None, metavar="FILE", help="composite over another picture (scaled to cover)")
    s.add_argument(
        "--threshold", type=float, default=None, metavar="T", help="the mask: alpha > T, in [0, 1] (default 0.5)"
    )
    s.add_argument(
        "--format",
        choices=list(ImageFormat),
        default=None,
        help="png (default), webp (lossless) or jpeg (the composite only; the others stay PNG); "
        "default from OUT's suffix when OUT is a file",
    )
    s.add_argument(
        "--png-level", type=int, default=None, metavar="0-9", help="zlib level of PNGs (server default: 1, fast)"
    )
    s.add_argument("--jpeg-quality", type=int, default=None, metavar="1-100", help="JPEG quality (default 90)")
    s.add_argument("--overwrite", action="store_true", help="redo pictures whose outputs exist")
    s.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="pictures at once (default: 8 on a GPU server, 3 on a CPU)"
    )
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=ENGINES)
    s.set_defaults(func=cmd_remove_background)

    s = sub.add_parser("segment", help="write the mask(s) selected by clicks and/or boxes (image.segment)")
    s.add_argument("input", metavar="IN", help="a PNG, JPEG or WebP picture")
    s.add_argument(
        "--point",
        action="append",
        type=_point,
        default=[],
        metavar="X,Y[:fg|:bg]",
        help="a click in picture pixels (origin top-left); foreground unless :bg; repeat for more",
    )
    s.add_argument(
        "--box",
        action="append",
        type=_box,
        default=[],
        metavar="X0,Y0,X1,Y1",
        help="a box: top-left, bottom-right; repeat for several objects (one call, one mask each)",
    )
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="png: the mask PNG (1-bit grayscale; OUT-1.png, ... for several); rle, polygons: a JSON file",
    )
    s.add_argument(
        "--all-masks", action="store_true", help="write the three candidates, best first: OUT-0.png, OUT-1.png, ..."
    )
    _format_flags(s, vocabulary.MaskFormat.PNG)
    s.add_argument(
        "--like-meta",
        action="store_true",
        help="the one mask Meta's predictor answers (multimask_output=False); needs --engine torch",
    )
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=ENGINES)
    s.set_defaults(func=cmd_segment)

    s = sub.add_parser(
        "segment-all", help="every object of a picture as COCO annotations (Meta's automatic mask generator)"
    )
    s.add_argument("input", metavar="IN", help="a PNG, JPEG or WebP picture")
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.json",
        help="the masks as JSON ({image, annotations}: COCO RLE, area, bbox, predicted_iou, ...)",
    )
    for name, kind in EVERYTHING_FLAGS:
        s.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help="Meta's parameter (docs/API.md)")
    s.add_argument(
        "--single-mask",
        action="store_true",
        help="one mask per point, Meta's single-mask answer (multimask_output=False); needs --engine torch",
    )
    _format_flags(s, vocabulary.MaskFormat.RLE)
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=ENGINES)
    s.set_defaults(func=cmd_segment_all)

    k = sub.add_parser("keys", help="app keys (only their hashes are kept by the servers)")
    ksub = k.add_subparsers(dest="keys_command", required=True)
    s = ksub.add_parser("add", help="make a key for an app, add its hash to the keys file, print the key once")
    s.add_argument("app", help="the app id ('*' for any app id without a key of its own)")
    s.add_argument("--keys-file", default=None, help="default: CRAFTAI_KEYS_FILE or ~/.config/craftai/keys")
    s.set_defaults(func=cmd_keys_add)
    s = ksub.add_parser("hash", help="print the keys-file line for a key given on standard input")
    s.add_argument("app", help="the app id the key is for")
    s.set_defaults(func=cmd_keys_hash)
    return p


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        return int(options.func(options))
    except CraftAiError as exc:
        print(f"craftai: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
